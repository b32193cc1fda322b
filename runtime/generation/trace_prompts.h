// `olmo2 trace`'s forwards: named activations of prompts, without generation
// (docs/architecture.md §13).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/communicator.h"
#include "runtime/model/model.h"
#include "runtime/trace/trace_spec.h"

namespace olmo2 {

/// The ranks of a trace job beyond one replica's TP and PP groups.
struct TraceJob {
  parallel::Communicator* world = nullptr;  ///< every rank of the job; null: one process
  int replica = 0;                          ///< this rank's data-parallel replica
  int replicas = 1;                         ///< data-parallel replicas
};

/// Called on world rank 0 with each prompt's index and its reads
/// (trace::ActivationStore::result()).
using TraceResultSink = std::function<void(size_t index, nlohmann::json activations)>;

/// One forward per prompt (no KV cache, no token chosen) with `spec`'s interventions
/// applied and its reads recorded (positions 0 … len−1 are the prompt; "generated" covers
/// nothing). Every rank of the job calls it with the same prompts and spec (checked
/// before: ids in the vocabulary, lengths within the context): replica d runs prompts
/// d, d + replicas, …, and after each round every rank sends its pieces to world rank 0
/// (trace::gather_pieces), which calls `sink` in prompt order — nothing is held beyond
/// one round. A spec without reads gathers nothing and gives `{}` per prompt. Throws
/// CollectiveTimeout when a peer never joins a gather, and what the forward throws.
void trace_prompts(const Olmo2Model& model, const std::vector<std::vector<int32_t>>& prompts,
                   const trace::TraceSpec& spec, const ParallelContext& ctx, const TraceJob& job,
                   const TraceResultSink& sink);

}  // namespace olmo2
