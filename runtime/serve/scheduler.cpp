#include "runtime/serve/scheduler.h"

#include <algorithm>
#include <limits>

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
  for (int64_t w : o.group_windows) {
    if (w < 0) OLMO2_THROW(InputError, "a KV group's attention window must be ≥ 0, got ", w);
  }
  // Cached blocks are keyed by group 0's chain, which must keep every block: a full group
  // (KVLayout puts them first). Every layer sliding: no prefix caching (docs/architecture.md §8).
  if (!o.group_windows.empty() && o.group_windows[0] > 0) opt_.prefix_caching = false;
  groups_ = std::max<int64_t>(1, static_cast<int64_t>(o.group_windows.size()));
}

int64_t kv_capacity_tokens(const SchedulerOptions& o) {
  const int64_t groups = std::max<int64_t>(1, static_cast<int64_t>(o.group_windows.size()));
  const int64_t everything = o.num_blocks / groups * o.block_size;
  int64_t full = 0, sliding_held = 0;
  for (int64_t w : o.group_windows) {
    if (w == 0) ++full;
    else sliding_held += blocks_for(w - 1 + o.max_batch_tokens, o.block_size) + 1;
  }
  if (sliding_held == 0 || sliding_held > o.num_blocks) return everything;
  if (full == 0) return std::numeric_limits<int64_t>::max() / 2;
  return std::max(everything, (o.num_blocks - sliding_held) / full * o.block_size);
}

bool Scheduler::grow(SchedSequence& s, int64_t add) {
  if (add <= 0) return true;
  std::vector<int32_t> ids;
  if (!allocator_.allocate(add * groups_, ids)) return false;
  if (groups_ == 1) {
    s.blocks.insert(s.blocks.end(), ids.begin(), ids.end());
    return true;
  }
  const size_t n = s.blocks.size() / static_cast<size_t>(groups_), a = static_cast<size_t>(add);
  std::vector<int32_t> grown;
  grown.reserve(s.blocks.size() + ids.size());
  for (size_t g = 0; g < static_cast<size_t>(groups_); ++g) {
    grown.insert(grown.end(), s.blocks.begin() + g * n, s.blocks.begin() + (g + 1) * n);
    grown.insert(grown.end(), ids.begin() + g * a, ids.begin() + (g + 1) * a);
  }
  s.blocks = std::move(grown);
  return true;
}

void Scheduler::release_all(SchedSequence& s) {
  std::vector<int32_t> held;
  held.reserve(s.blocks.size());
  for (int32_t id : s.blocks) {
    if (id >= 0) held.push_back(id);
  }
  allocator_.release(held);
  s.blocks.clear();
}

void Scheduler::truncate(SchedSequence& s, int64_t keep) {
  const int64_t n = static_cast<int64_t>(s.blocks.size()) / groups_;
  if (keep >= n) return;
  std::vector<int32_t> gone, kept;
  for (int64_t g = 0; g < groups_; ++g) {
    for (int64_t b = 0; b < n; ++b) {
      const int32_t id = s.blocks[static_cast<size_t>(g * n + b)];
      if (b < keep) kept.push_back(id);
      else if (id >= 0) gone.push_back(id);
    }
  }
  allocator_.release(gone);
  s.blocks = std::move(kept);
}

void Scheduler::grant_lookahead(StepPlan& plan, int64_t& budget) {
  const int64_t k = opt_.num_speculative_tokens;
  if (k <= 0) return;
  const int64_t watermark = std::max<int64_t>(1, opt_.num_blocks / 100);
  // The plan lists a prefix of the running sequences in their order: the running ones the
  // budget reached, then the admitted ones.
  OLMO2_CHECK(plan.sequences.size() <= running_.size(), "a plan of ", plan.sequences.size(), " sequences for ",
              running_.size(), " running");
  for (size_t i = 0; i < plan.sequences.size() && budget > 0; ++i) {
    PlannedSequence& p = plan.sequences[i];
    SchedSequence& s = running_[i];
    OLMO2_CHECK(s.id == p.seq_id, "plan entry ", i, " is sequence ", p.seq_id, ", running ", s.id);
    const int64_t generated = static_cast<int64_t>(s.tokens.size()) - s.prompt_len;
    // A decode: its one pending token is a generated one.
    if (!s.speculate || !s.forks.empty() || !p.sample || p.tokens.size() != 1 || generated < 1) continue;
    int64_t look = std::min({k, budget, s.max_tokens - generated - 1});
    if (generated < s.min_tokens) look = std::min(look, s.min_tokens - generated - 1);
    const int64_t held = static_cast<int64_t>(s.blocks.size()) / groups_;
    while (look > 0 && (blocks_for(s.computed + 1 + look, opt_.block_size) - held) * groups_ >
                           allocator_.free_count() - watermark) {
      --look;
    }
    if (look <= 0) continue;
    grow(s, blocks_for(s.computed + 1 + look, opt_.block_size) - held);
    p.blocks = s.blocks;
    p.lookahead = static_cast<int32_t>(look);
    budget -= look;
  }
}

void Scheduler::release_before_window(SchedSequence& s, int64_t next) {
  const size_t n = s.blocks.size() / static_cast<size_t>(groups_);
  for (size_t g = 0; g < opt_.group_windows.size(); ++g) {
    const int64_t w = opt_.group_windows[g];
    if (w == 0) continue;
    // Blocks b with (b + 1)·block_size ≤ next − w + 1 hold only positions before the window.
    const size_t before = static_cast<size_t>(std::max<int64_t>(0, next - w + 1) / opt_.block_size);
    std::vector<int32_t> gone;
    for (size_t b = 0; b < std::min(before, n); ++b) {
      int32_t& id = s.blocks[g * n + b];
      if (id >= 0) gone.push_back(id), id = -1;
    }
    allocator_.release(gone);
  }
}

int64_t Scheduler::held_in_group(int64_t group) const {
  OLMO2_CHECK(group >= 0 && group < groups_, "KV group ", group, " of ", groups_);
  int64_t held = 0;
  for (const SchedSequence& s : running_) {
    const std::span<const int32_t> table = KVCache::group_table(s.blocks, groups_, group);
    held += std::count_if(table.begin(), table.end(), [](int32_t id) { return id >= 0; });
  }
  return held;
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
    f.cache_salt = seq.cache_salt;  // they share seq's blocks
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
      release_all(*it);
      orphan_forks(*it);
      running_.erase(it);
      return true;
    }
    if (drop_fork(*it)) return true;
  }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->id == id) {
      release_all(*it);
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
  release_all(seq);
  seq.computed = 0;
  seq.cached.clear();
  ++seq.preemptions;
  ++preemptions_;
  waiting_.push_front(std::move(seq));
}

namespace {
/// The key of group g's block after the group-0 prefix `chain` (the identity of group 0's
/// block at the same place): the chain stands for the tokens, the marker −1 − g for
/// the group (a group-0 key has block_size token ids ≥ 0 instead).
BlockKey group_key(CachedBlock chain, int64_t group) { return BlockKey{chain, {static_cast<int32_t>(-1 - group)}}; }
}  // namespace

Scheduler::PrefixHit Scheduler::cached_prefix(const SchedSequence& s) const {
  PrefixHit hit;
  if (!opt_.prefix_caching || !s.read_cache) return hit;
  const int64_t bs = opt_.block_size;
  // Never the block of the last token: its logits must be computed.
  const int64_t most = (static_cast<int64_t>(s.tokens.size()) - 1) / bs;
  BlockKey key;
  for (int64_t i = 0; i < most; ++i) {  // group 0 (a full group): the chain of token blocks
    key.parent = hit.chain.empty() ? CachedBlock{} : hit.chain.back();
    key.salt = i == 0 ? s.cache_salt : 0;  // later blocks inherit it through the parent
    key.tokens.assign(s.tokens.begin() + i * bs, s.tokens.begin() + (i + 1) * bs);
    const std::optional<CachedBlock> found = allocator_.cache().find(key);
    if (!found) break;
    hit.chain.push_back(*found);
  }
  // Every other group's block i under group 0's identity of block i, or −1 (vLLM's rule
  // for hybrid models: full groups need every block before the hit, sliding groups the
  // blocks of the window of the hit's first computed position).
  int64_t p = static_cast<int64_t>(hit.chain.size());
  std::vector<std::vector<int32_t>> found(static_cast<size_t>(groups_));
  for (int64_t g = 0; g < groups_; ++g) {
    std::vector<int32_t>& f = found[static_cast<size_t>(g)];
    for (int64_t i = 0; i < p; ++i) {
      const CachedBlock& c = hit.chain[static_cast<size_t>(i)];
      const std::optional<CachedBlock> b = g == 0 ? std::optional<CachedBlock>(c)
                                                  : allocator_.cache().find(group_key(c, g));
      f.push_back(b ? b->block : -1);
    }
  }
  auto first_seen = [&](int64_t g, int64_t blocks) {  // the first block the window of position blocks·bs sees
    const int64_t w = opt_.group_windows.empty() ? 0 : opt_.group_windows[static_cast<size_t>(g)];
    return w == 0 ? 0 : std::max<int64_t>(0, blocks * bs - w + 1) / bs;
  };
  // missing[g][i]: the last block ≤ i that group g lacks (−1: none), so a hit of P blocks
  // is served when, in every group, that of P − 1 lies before the first block it needs.
  std::vector<std::vector<int64_t>> missing(static_cast<size_t>(groups_));
  for (int64_t g = 0; g < groups_; ++g) {
    int64_t last = -1;
    for (int64_t i = 0; i < p; ++i) {
      if (found[static_cast<size_t>(g)][static_cast<size_t>(i)] < 0) last = i;
      missing[static_cast<size_t>(g)].push_back(last);
    }
  }
  auto covered = [&](int64_t blocks) {
    for (int64_t g = 0; g < groups_; ++g) {
      if (missing[static_cast<size_t>(g)][static_cast<size_t>(blocks - 1)] >= first_seen(g, blocks)) return false;
    }
    return true;
  };
  while (p > 0 && !covered(p)) --p;  // the longest hit every group can serve
  hit.chain.resize(static_cast<size_t>(p));
  for (int64_t g = 0; g < groups_; ++g) {
    const std::vector<int32_t>& f = found[static_cast<size_t>(g)];
    for (int64_t i = 0; i < p; ++i) hit.table.push_back(i < first_seen(g, p) ? -1 : f[static_cast<size_t>(i)]);
  }
  return hit;
}

void Scheduler::cache_full_blocks(SchedSequence& s) {
  if (!opt_.prefix_caching) return;
  const int64_t bs = opt_.block_size;
  const size_t n = s.blocks.size() / static_cast<size_t>(groups_);
  for (int64_t i = static_cast<int64_t>(s.cached.size()); i < s.computed / bs; ++i) {
    BlockKey key{i == 0 ? CachedBlock{} : s.cached.back(),
                 std::vector<int32_t>(s.tokens.begin() + i * bs, s.tokens.begin() + (i + 1) * bs),
                 i == 0 ? s.cache_salt : 0};
    s.cached.push_back(allocator_.cache().insert(s.blocks[static_cast<size_t>(i)], std::move(key)));
    for (int64_t g = 1; g < groups_; ++g) {  // under group 0's identity (a released block is cached already)
      const int32_t id = s.blocks[static_cast<size_t>(g) * n + static_cast<size_t>(i)];
      if (id >= 0) allocator_.cache().insert(id, group_key(s.cached.back(), g));
    }
  }
}

void Scheduler::fork(SchedSequence& parent, std::vector<SchedSequence>& made) {
  const int64_t bs = opt_.block_size;
  while (!parent.forks.empty() && allocator_.free_count() >= groups_ &&
         running() + static_cast<int64_t>(made.size()) < opt_.max_running) {
    SchedSequence& c = parent.forks.front();
    const int64_t shared = static_cast<int64_t>(c.tokens.size()) - 1;  // the prompt but its last token
    if (parent.computed < shared) break;
    const int64_t full = shared / bs;
    std::vector<int32_t> own;  // one block per group for position `shared` on
    allocator_.allocate(groups_, own);
    for (int64_t g = 0; g < groups_; ++g) {
      const std::span<const int32_t> table = KVCache::group_table(parent.blocks, groups_, g);
      for (int64_t b = 0; b < full; ++b) {  // a block the parent released stays released
        const int32_t id = table[static_cast<size_t>(b)];
        if (id >= 0) allocator_.share(id);
        c.blocks.push_back(id);
      }
      c.blocks.push_back(own[static_cast<size_t>(g)]);
      if (shared % bs != 0) copies_.push_back({table[static_cast<size_t>(full)], c.blocks.back()});
    }
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
    for (int64_t g = 0; g < groups_; ++g) {
      const std::span<const int32_t> table = KVCache::group_table(s.blocks, groups_, g);
      for (int64_t b = s.computed / opt_.block_size; b < blocks_for(s.computed + n, opt_.block_size); ++b) {
        const int32_t id = table[static_cast<size_t>(b)];
        OLMO2_CHECK(id >= 0 && allocator_.refs(id) == 1 && !allocator_.cache().contains(id), "sequence ", s.id,
                    " would write into KV block ", id, " of group ", g, ", which is released, shared or cached");
      }
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
    const int64_t add = blocks_for(s.computed + n, opt_.block_size) - static_cast<int64_t>(s.blocks.size()) / groups_;
    const int64_t need = add * groups_;  // one id per group
    while (need > allocator_.free_count() && running_.size() > i + 1) {
      preempt(running_.back());
      running_.pop_back();
    }
    if (need > allocator_.free_count()) {  // nothing newer left to pre-empt: wait itself
      preempt(running_[i]);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    grow(s, add);
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
    const PrefixHit hit = cached_prefix(s);
    const int64_t hits = static_cast<int64_t>(hit.chain.size());
    const int64_t from = hits * opt_.block_size;
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - from, budget);
    const int64_t add = blocks_for(from + n, opt_.block_size) - hits;
    const int64_t need = add * groups_;  // one id per group
    // Cached blocks nobody holds count as free: reviving them takes them from the pool.
    const int64_t revived = std::count_if(hit.table.begin(), hit.table.end(), [&](int32_t id) {
      return id >= 0 && allocator_.refs(id) == 0;
    });
    // The watermark keeps blocks for running decodes; an empty batch may use them all.
    if (need + revived > allocator_.free_count() - (running_.empty() ? 0 : watermark)) break;
    for (int32_t id : hit.table) {  // before allocate, which could evict them
      if (id >= 0) allocator_.share(id);
      s.blocks.push_back(id);
    }
    s.cached = hit.chain;
    if (opt_.prefix_caching && s.read_cache) {
      cache_queries_ += static_cast<int64_t>(s.tokens.size());
      cache_hits_ += from;
    }
    s.computed = from;
    grow(s, add);
    running_.push_back(std::move(s));
    waiting_.pop_front();
    plan_chunk(running_.back(), n);
  }
  // Room for drafted tokens (speculative decoding) from what admission left: drafts never
  // delay a newcomer's prefill.
  grant_lookahead(plan, budget);
  // 3. Micro-batches for the pipeline: balance tokens, keep plan order within each.
  const int32_t m = static_cast<int32_t>(std::min<int64_t>(opt_.micro_batches, static_cast<int64_t>(plan.sequences.size())));
  plan.micro_batches = std::max(m, 1);
  std::vector<int64_t> load(static_cast<size_t>(plan.micro_batches), 0);
  for (PlannedSequence& p : plan.sequences) {
    const auto lightest = std::min_element(load.begin(), load.end());
    p.micro_batch = static_cast<int32_t>(lightest - load.begin());
    *lightest += static_cast<int64_t>(p.tokens.size()) + p.lookahead;
  }
  // Copies go out with the first plan that runs: nothing writes a block before them.
  if (!plan.sequences.empty()) plan.copies = std::move(copies_), copies_.clear();
  return plan;
}

void Scheduler::step_done(const StepPlan& plan, const std::vector<SelectedToken>& tokens) {
  std::vector<std::vector<SelectedToken>> emitted(plan.sequences.size());
  size_t k = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    if (!plan.sequences[i].sample) continue;
    OLMO2_CHECK(plan.sequences[i].draft == 0, "sequence ", plan.sequences[i].seq_id, " has drafted tokens");
    OLMO2_CHECK(k < tokens.size(), "fewer results than sampled sequences");
    emitted[i].push_back(tokens[k++]);
  }
  step_done(plan, emitted);
}

void Scheduler::step_done(const StepPlan& plan, const std::vector<std::vector<SelectedToken>>& emitted) {
  OLMO2_CHECK(emitted.size() == plan.sequences.size(), "results for ", emitted.size(), " of ",
              plan.sequences.size(), " planned sequences");
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const PlannedSequence& p = plan.sequences[i];
    const std::vector<SelectedToken>& e = emitted[i];
    const auto it = std::find_if(running_.begin(), running_.end(), [&](const SchedSequence& s) { return s.id == p.seq_id; });
    OLMO2_CHECK(it != running_.end(), "planned sequence ", p.seq_id, " is not running");
    OLMO2_CHECK(p.sample ? (e.size() <= static_cast<size_t>(p.draft) + 1 && (!e.empty() || p.draft > 0)) : e.empty(),
                "sequence ", p.seq_id, " emitted ", e.size(), " tokens for ", p.draft, " drafted");
    if (p.sample && e.empty()) {  // redone without drafts
      it->speculate = false;
    } else {
      // Accepted drafts' positions hold their keys and values; rejected ones are dropped.
      it->computed += static_cast<int64_t>(p.tokens.size()) - p.draft + static_cast<int64_t>(e.size()) - (p.sample ? 1 : 0);
      for (const SelectedToken& t : e) it->tokens.push_back(t.id);
    }
    if (p.lookahead > 0) truncate(*it, blocks_for(it->computed, opt_.block_size));
    cache_full_blocks(*it);
    // Sliding groups: what no later query sees. A parent keeps what its forks compute with.
    const int64_t next = it->forks.empty() ? it->computed
                                           : std::min<int64_t>(it->computed, it->forks.front().tokens.size() - 1);
    release_before_window(*it, next);  // nothing without sliding groups
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
