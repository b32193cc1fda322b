// One serving step's plan: what rank 0's scheduler decided and every rank executes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/generation/token_selection.h"

namespace olmo2 {

/// One sequence's share of a step.
struct PlannedSequence {
  int64_t seq_id = 0;           ///< the scheduler's id (never reused)
  int32_t micro_batch = 0;      ///< pipeline micro-batch, 0 … micro_batches−1
  int64_t start = 0;            ///< positions already in the KV cache
  std::vector<int32_t> tokens;  ///< new tokens (a prompt chunk, or the last sampled token)
  std::vector<int32_t> blocks;  ///< the sequence's whole block table
  bool sample = false;          ///< these tokens end the known text: choose the next token
  SelectionRequest selection;   ///< how (when sample)
};

/// A step: the sequences to run, split into micro-batches for the pipeline stages; or
/// the order to stop.
struct StepPlan {
  bool shutdown = false;
  int32_t micro_batches = 1;
  std::vector<PlannedSequence> sequences;
  /// Sequences with sample set, in plan order (the order of the step's results).
  int64_t sampled() const;
};

/// Flat int64 encoding for the broadcast (doubles by their bits).
std::vector<int64_t> encode_plan(const StepPlan& plan);
/// Inverse of encode_plan. Throws Error for a truncated or malformed buffer.
StepPlan decode_plan(std::span<const int64_t> data);

/// Flat float encoding of a step's chosen tokens (in plan order of the sampled
/// sequences): per sequence id, logprob, then `logprobs` (logprob, id) pairs. Ids are
/// exact in a float (vocabularies are far below 2^24).
std::vector<float> encode_results(const StepPlan& plan, const std::vector<SelectedToken>& tokens);
/// Its size for `plan`, in floats.
int64_t results_size(const StepPlan& plan);
std::vector<SelectedToken> decode_results(const StepPlan& plan, std::span<const float> data);

}  // namespace olmo2
