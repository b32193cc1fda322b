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

void Scheduler::add(SchedSequence seq, std::vector<SchedSequence> forks) {
  OLMO2_CHECK(!seq.tokens.empty(), "sequence ", seq.id, " has no tokens");
  auto fresh = [](SchedSequence& s) {
    s.computed = 0;
    s.blocks.clear();
    s.cached.clear();
    s.forks.clear();
  };
  fresh(seq);
  for (SchedSequence& f : forks) {
    fresh(f);
    f.tokens = seq.tokens;
    f.prompt_len = seq.prompt_len;
  }
  const int64_t id = seq.id;
  if (seq.tokens.size() > 1) seq.forks = std::move(forks);
  waiting_.push_back(std::move(seq));
  for (SchedSequence& f : forks) {  // a one-token prompt: nothing to share
    OLMO2_CHECK(f.id != id, "a fork of sequence ", id, " has its id");
    waiting_.push_back(std::move(f));
  }
}

void Scheduler::orphan_forks(SchedSequence& parent) {
  for (auto it = parent.forks.rbegin(); it != parent.forks.rend(); ++it) waiting_.push_front(std::move(*it));
  parent.forks.clear();
}

bool Scheduler::remove(int64_t id) {
  auto drop_fork = [&](SchedSequence& s) {
    const auto f = std::find_if(s.forks.begin(), s.forks.end(), [&](const SchedSequence& q) { return q.id == id; });
    if (f == s.forks.end()) return false;
    s.forks.erase(f);
    return true;
  };
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->id == id) {
      allocator_.release(it->blocks);
      orphan_forks(*it);
      running_.erase(it);
      return true;
    }
    if (drop_fork(*it)) return true;
  }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->id == id) {
      allocator_.release(it->blocks);
      SchedSequence gone = std::move(*it);
      waiting_.erase(it);
      orphan_forks(gone);
      return true;
    }
    if (drop_fork(*it)) return true;
  }
  return false;
}

void Scheduler::preempt(SchedSequence& seq) {
  allocator_.release(seq.blocks);
  seq.computed = 0;
  seq.cached.clear();
  ++seq.preemptions;
  ++preemptions_;
  waiting_.push_front(std::move(seq));
}

std::vector<CachedBlock> Scheduler::cached_prefix(const SchedSequence& s) const {
  std::vector<CachedBlock> hits;
  if (!opt_.prefix_caching || !s.read_cache) return hits;
  const int64_t bs = opt_.block_size;
  // Never the block of the last token: its logits must be computed.
  const int64_t most = (static_cast<int64_t>(s.tokens.size()) - 1) / bs;
  BlockKey key;
  for (int64_t i = 0; i < most; ++i) {
    key.parent = hits.empty() ? CachedBlock{} : hits.back();
    key.tokens.assign(s.tokens.begin() + i * bs, s.tokens.begin() + (i + 1) * bs);
    const std::optional<CachedBlock> hit = allocator_.cache().find(key);
    if (!hit) break;
    hits.push_back(*hit);
  }
  return hits;
}

void Scheduler::cache_full_blocks(SchedSequence& s) {
  if (!opt_.prefix_caching) return;
  const int64_t bs = opt_.block_size;
  for (int64_t i = static_cast<int64_t>(s.cached.size()); i < s.computed / bs; ++i) {
    BlockKey key{i == 0 ? CachedBlock{} : s.cached.back(),
                 std::vector<int32_t>(s.tokens.begin() + i * bs, s.tokens.begin() + (i + 1) * bs)};
    s.cached.push_back(allocator_.cache().insert(s.blocks[static_cast<size_t>(i)], std::move(key)));
  }
}

void Scheduler::fork(SchedSequence& parent, std::vector<SchedSequence>& made) {
  const int64_t bs = opt_.block_size;
  while (!parent.forks.empty() && allocator_.free_count() >= 1 &&
         running() + static_cast<int64_t>(made.size()) < opt_.max_running) {
    SchedSequence& c = parent.forks.front();
    const int64_t shared = static_cast<int64_t>(c.tokens.size()) - 1;  // the prompt but its last token
    if (parent.computed < shared) break;
    const int64_t full = shared / bs;
    for (int64_t b = 0; b < full; ++b) {
      allocator_.share(parent.blocks[static_cast<size_t>(b)]);
      c.blocks.push_back(parent.blocks[static_cast<size_t>(b)]);
    }
    allocator_.allocate(1, c.blocks);  // position `shared` on
    if (shared % bs != 0) copies_.push_back({parent.blocks[static_cast<size_t>(full)], c.blocks.back()});
    c.computed = shared;
    c.cached.assign(parent.cached.begin(),
                    parent.cached.begin() + std::min<int64_t>(full, static_cast<int64_t>(parent.cached.size())));
    made.push_back(std::move(c));
    parent.forks.erase(parent.forks.begin());
  }
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = opt_.max_batch_tokens;
  const int64_t preempted_before = preemptions_;
  auto plan_chunk = [&](SchedSequence& s, int64_t n) {
    for (int64_t b = s.computed / opt_.block_size; b < blocks_for(s.computed + n, opt_.block_size); ++b) {
      const int32_t id = s.blocks[static_cast<size_t>(b)];
      OLMO2_CHECK(allocator_.refs(id) == 1 && !allocator_.cache().contains(id), "sequence ", s.id,
                  " would write into KV block ", id, ", which is shared or cached");
    }
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
    OLMO2_CHECK(s.blocks.empty() && s.computed == 0, "waiting sequence ", s.id, " holds KV blocks");
    // Start from its longest cached prefix.
    const std::vector<CachedBlock> hits = cached_prefix(s);
    const int64_t from = static_cast<int64_t>(hits.size()) * opt_.block_size;
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - from, budget);
    const int64_t need = blocks_for(from + n, opt_.block_size) - static_cast<int64_t>(hits.size());
    // Cached blocks nobody holds count as free: reviving them takes them from the pool.
    const int64_t revived = std::count_if(hits.begin(), hits.end(), [&](const CachedBlock& h) {
      return allocator_.refs(h.block) == 0;
    });
    // The watermark keeps blocks for running decodes; an empty batch may use them all.
    if (need + revived > allocator_.free_count() - (running_.empty() ? 0 : watermark)) break;
    for (const CachedBlock& h : hits) {  // before allocate, which could evict them
      allocator_.share(h.block);
      s.blocks.push_back(h.block);
      s.cached.push_back(h);
    }
    if (opt_.prefix_caching && s.read_cache) {
      cache_queries_ += static_cast<int64_t>(s.tokens.size());
      cache_hits_ += from;
    }
    s.computed = from;
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
  // Copies go out with the first plan that runs: nothing writes a block before them.
  if (!plan.sequences.empty()) plan.copies = std::move(copies_), copies_.clear();
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
    cache_full_blocks(*it);
  }
  // Forks join the running batch (newest, so first to be pre-empted) holding their blocks:
  // a waiting sequence never holds blocks.
  std::vector<SchedSequence> made;
  for (SchedSequence& s : running_) {
    if (!s.forks.empty()) fork(s, made);
  }
  for (SchedSequence& c : made) running_.push_back(std::move(c));
}

const SchedSequence* Scheduler::find(int64_t id) const {
  auto in = [&](const auto& list) -> const SchedSequence* {
    for (const SchedSequence& s : list) {
      if (s.id == id) return &s;
      for (const SchedSequence& f : s.forks) if (f.id == id) return &f;
    }
    return nullptr;
  };
  if (const SchedSequence* s = in(running_)) return s;
  return in(waiting_);
}

double Scheduler::kv_usage() const {
  return 1.0 - static_cast<double>(allocator_.free_count()) / static_cast<double>(allocator_.total());
}

}  // namespace olmo2
