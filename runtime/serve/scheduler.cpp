#include "runtime/serve/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace olmo2 {

Scheduler::Scheduler(const SchedulerOptions& o) : opt_(o), allocator_(std::max<int64_t>(o.num_blocks, 1)) {
  if (o.num_blocks < 1) OLMO2_THROW(InputError, "the KV cache has no blocks (num_blocks ", o.num_blocks, ")");
  if (o.block_size < 1) OLMO2_THROW(InputError, "KV block size must be ≥ 1, got ", o.block_size);
  if (o.max_running < 1) OLMO2_THROW(InputError, "max running requests must be ≥ 1, got ", o.max_running);
  if (o.max_batch_tokens < o.max_running) {
    OLMO2_THROW(InputError, "max batch tokens ", o.max_batch_tokens, " is below max running requests ",
                o.max_running, ": every running sequence needs a token per step");
  }
  if (o.micro_batches < 1) OLMO2_THROW(InputError, "micro-batches must be ≥ 1, got ", o.micro_batches);
}

void Scheduler::add(SchedSequence seq) {
  OLMO2_CHECK(!seq.tokens.empty(), "sequence ", seq.id, " has no tokens");
  seq.computed = 0;
  seq.blocks.clear();
  waiting_.push_back(std::move(seq));
}

bool Scheduler::remove(int64_t id) {
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->id == id) {
      allocator_.release(it->blocks);
      running_.erase(it);
      return true;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->id == id) {
      allocator_.release(it->blocks);
      waiting_.erase(it);
      return true;
    }
  }
  return false;
}

void Scheduler::preempt(SchedSequence& seq) {
  allocator_.release(seq.blocks);
  seq.computed = 0;
  ++seq.preemptions;
  ++preemptions_;
  waiting_.push_front(std::move(seq));
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = opt_.max_batch_tokens;
  const int64_t preempted_before = preemptions_;
  auto plan_chunk = [&](SchedSequence& s, int64_t n) {
    PlannedSequence p;
    p.seq_id = s.id;
    p.start = s.computed;
    p.tokens.assign(s.tokens.begin() + s.computed, s.tokens.begin() + s.computed + n);
    p.blocks = s.blocks;
    p.sample = s.computed + n == static_cast<int64_t>(s.tokens.size());
    p.selection = s.selection;
    p.selection.draw = static_cast<uint64_t>(static_cast<int64_t>(s.tokens.size()) - s.prompt_len);
    plan.sequences.push_back(std::move(p));
    budget -= n;
  };
  // 1. Running sequences, oldest first; pre-empt the newest when blocks run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    SchedSequence& s = running_[i];
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - s.computed, budget);
    const int64_t need = blocks_for(s.computed + n, opt_.block_size) - static_cast<int64_t>(s.blocks.size());
    while (need > allocator_.free_count() && running_.size() > i + 1) {
      preempt(running_.back());
      running_.pop_back();
    }
    if (need > allocator_.free_count()) {  // nothing newer left to pre-empt: wait itself
      preempt(running_[i]);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    allocator_.allocate(need, s.blocks);
    plan_chunk(s, n);
    ++i;
  }
  // 2. Admit waiting sequences, first come first served.
  const int64_t watermark = std::max<int64_t>(1, opt_.num_blocks / 100);
  // Not in a step that had to pre-empt: the freed blocks are for the running batch.
  while (budget > 0 && !waiting_.empty() && running() < opt_.max_running && preemptions_ == preempted_before) {
    SchedSequence& s = waiting_.front();
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()), budget);
    const int64_t need = blocks_for(n, opt_.block_size);
    // The watermark keeps blocks for running decodes; an empty batch may use them all.
    if (need > allocator_.free_count() - (running_.empty() ? 0 : watermark)) break;
    allocator_.allocate(need, s.blocks);
    running_.push_back(std::move(s));
    waiting_.pop_front();
    plan_chunk(running_.back(), n);
  }
  // 3. Micro-batches for the pipeline: balance tokens, keep plan order within each.
  const int32_t m = static_cast<int32_t>(std::min<int64_t>(opt_.micro_batches, static_cast<int64_t>(plan.sequences.size())));
  plan.micro_batches = std::max(m, 1);
  std::vector<int64_t> load(static_cast<size_t>(plan.micro_batches), 0);
  for (PlannedSequence& p : plan.sequences) {
    const auto lightest = std::min_element(load.begin(), load.end());
    p.micro_batch = static_cast<int32_t>(lightest - load.begin());
    *lightest += static_cast<int64_t>(p.tokens.size());
  }
  return plan;
}

void Scheduler::step_done(const StepPlan& plan, const std::vector<SelectedToken>& tokens) {
  size_t k = 0;
  for (const PlannedSequence& p : plan.sequences) {
    const auto it = std::find_if(running_.begin(), running_.end(), [&](const SchedSequence& s) { return s.id == p.seq_id; });
    OLMO2_CHECK(it != running_.end(), "planned sequence ", p.seq_id, " is not running");
    it->computed += static_cast<int64_t>(p.tokens.size());
    if (p.sample) {
      OLMO2_CHECK(k < tokens.size(), "fewer results than sampled sequences");
      it->tokens.push_back(tokens[k++].id);
    }
  }
}

const SchedSequence* Scheduler::find(int64_t id) const {
  for (const auto& s : running_) if (s.id == id) return &s;
  for (const auto& s : waiting_) if (s.id == id) return &s;
  return nullptr;
}

double Scheduler::kv_usage() const {
  return 1.0 - static_cast<double>(allocator_.free_count()) / static_cast<double>(allocator_.total());
}

}  // namespace olmo2
