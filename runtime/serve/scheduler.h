// Continuous batching on rank 0: which sequences run in each step, with which chunk of
// their tokens and which KV blocks (docs/architecture.md §8).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "runtime/model/kv_cache.h"
#include "runtime/serve/block_allocator.h"
#include "runtime/serve/serve_plan.h"

namespace olmo2 {

struct SchedulerOptions {
  int64_t num_blocks = 0;          ///< KV blocks in every rank's pool
  int64_t block_size = 16;         ///< positions per block
  int64_t max_running = 64;        ///< sequences in the running batch at most
  int64_t max_batch_tokens = 512;  ///< tokens per step (prefill chunks + decodes), ≥ max_running
  int32_t micro_batches = 1;       ///< pipeline micro-batches per step (the pp size)
};

/// One sequence as the scheduler sees it.
struct SchedSequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;  ///< prompt, then every token generated so far
  int64_t prompt_len = 0;
  int64_t computed = 0;         ///< leading positions whose keys/values are in the cache
  std::vector<int32_t> blocks;  ///< block table
  SelectionRequest selection;   ///< sampling parameters (draw = tokens generated)
  int64_t preemptions = 0;
};

/// vLLM-style scheduling with chunked prefill and recompute pre-emption. Each step:
/// running sequences first (oldest first), each taking min(pending tokens, budget left)
/// — a decode is one token, a prompt is cut into chunks of the step's token budget;
/// when a sequence needs a block and none is free, the newest running sequence is
/// pre-empted: its blocks are freed and it goes back to the front of the waiting queue
/// with everything it has generated, to be recomputed later (never dropped). Then
/// waiting sequences are admitted first come, first served, while the budget, the
/// running limit and free blocks (less a 1% watermark kept for running decodes) allow.
/// Not thread-safe (the engine thread owns it).
class Scheduler {
 public:
  /// Throws InputError for options that cannot work (no blocks, max_batch_tokens <
  /// max_running, micro_batches < 1).
  explicit Scheduler(const SchedulerOptions& options);

  /// Queues a new sequence (tokens = its prompt, non-empty) at the back.
  void add(SchedSequence seq);
  /// Drops a sequence wherever it is and frees its blocks; false when unknown.
  bool remove(int64_t id);
  /// The next step's plan; no sequences when nothing can run.
  StepPlan schedule();
  /// Applies a step's outcome: planned positions are now cached, and every sampled
  /// sequence gets its token appended (tokens in plan order of the sampled entries).
  void step_done(const StepPlan& plan, const std::vector<SelectedToken>& tokens);

  const SchedSequence* find(int64_t id) const;
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  /// Share of blocks in use, 0 … 1.
  double kv_usage() const;
  int64_t free_blocks() const { return allocator_.free_count(); }
  int64_t preemptions() const { return preemptions_; }
  const SchedulerOptions& options() const { return opt_; }

 private:
  void preempt(SchedSequence& seq);

  SchedulerOptions opt_;
  BlockAllocator allocator_;
  std::vector<SchedSequence> running_;  // oldest first
  std::deque<SchedSequence> waiting_;
  int64_t preemptions_ = 0;
};

}  // namespace olmo2
