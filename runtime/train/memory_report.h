// The memory plan of one `olmo2 train` run: its refusal under --memory-per-rank before
// any work, and the peak resident memory each rank reports beside it
// (docs/architecture.md §7 "Memory plan").
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/topology.h"
#include "runtime/model/config.h"
#include "runtime/train/memory_plan.h"
#include "runtime/train/train_options.h"

namespace olmo2 {

/// The plan options that describe a run of `o` in `layout` with `micro_batch` sequences
/// per micro-batch: its zero stage (0 with dp 1, where every stage is plain AdamW), its
/// precision, seq_len, global batch, device, bucket and --pp-layers. Recomputation: none
/// (TrainOptions has no recompute mode yet). Throws nothing.
MemoryPlanOptions run_plan_options(const TrainOptions& o, const parallel::Layout& layout, int64_t micro_batch);

/// The planned total of every world rank (bytes, rank order) for the run; under context
/// parallelism (layout.cp > 1) a rank plans as its (tp, dp, pp) rank with seq_len / cp
/// tokens a sequence (run_plan_options). With
/// o.memory_per_rank > 0 and a rank whose total exceeds it, InputError naming the option,
/// the size, the rank and its coordinates, its total and its three largest components.
/// Pure (every rank computes the same answer; call it inside parallel::agree). Throws
/// what plan_memory throws.
std::vector<int64_t> check_run_memory(const ModelConfig& config, const TrainOptions& o,
                                      const parallel::Layout& layout, int64_t micro_batch);

/// Collective over `world` (null: this process alone): gathers every rank's peak
/// resident memory (monitoring::peak_resident_bytes) and has rank 0 write one line per
/// rank to `out`: "memory: rank R peak X GB (plan Y GB)", `planned` indexed by rank.
/// CollectiveTimeout when a peer never joins.
void report_peak_memory(parallel::Communicator* world, const std::vector<int64_t>& planned, std::ostream& out);

}  // namespace olmo2
