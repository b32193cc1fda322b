// Continuous batching on rank 0: which sequences run in each step, with which chunk of
// their tokens and which KV blocks (docs/architecture.md §8).
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
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
  bool prefix_caching = true;      ///< reuse cached full blocks of equal prefixes (off when group 0 is sliding)
  /// Per KV group (KVLayout::windows()), its layers' attention window: 0 for full
  /// attention, W for sliding layers, whose blocks wholly before the window of a
  /// sequence's next position are released. Empty: one group, no window (OLMo 2).
  std::vector<int64_t> group_windows = {};
  /// Speculative decoding (docs/architecture.md §8): the most drafted tokens a decoding
  /// sequence is given room for per step (PlannedSequence::lookahead); 0: none.
  int32_t num_speculative_tokens = 0;
};

/// Positions one sequence can always hold in `options.num_blocks` blocks (what a request
/// may need at most): with G groups each holding every block, (num_blocks / G)·block_size;
/// with sliding groups, which hold at most blocks_for(W − 1 + max_batch_tokens) + 1 blocks
/// each (the window and a chunk), the full groups share what they leave — more when that
/// is more; with sliding groups only, every length (INT64_MAX / 2) once they fit.
int64_t kv_capacity_tokens(const SchedulerOptions& options);

/// One sequence as the scheduler sees it.
struct SchedSequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;  ///< prompt, then every token generated so far
  int64_t prompt_len = 0;
  int64_t computed = 0;         ///< leading positions whose keys/values are in the cache
  /// Block table: one table per KV group, of equal lengths (one entry per logical block),
  /// group after group (KVCache's layout); −1 where a sliding group released the block.
  std::vector<int32_t> blocks;
  SelectionRequest selection;   ///< sampling parameters (draw = tokens generated)
  int64_t preemptions = 0;
  /// Prefix caching: whether admission may start from cached blocks (false: every
  /// position is computed, e.g. to score the prompt); its full blocks enter the cache
  /// either way.
  bool read_cache = true;
  /// Prefix caching: the salt of the first block's key (BlockKey::salt; the interned id of
  /// the sequence's interventions, 0 without: docs/architecture.md §13), so that blocks
  /// are shared only between sequences of equal salts. Forks take their parent's.
  uint64_t cache_salt = 0;
  /// Prefix caching: the cache identities of the leading full blocks of KV group 0
  /// (registered by this sequence, or found in the cache or shared from its fork parent).
  std::vector<CachedBlock> cached;
  /// Sequences of the same prompt waiting to fork from this one (n > 1; Scheduler::add).
  std::vector<SchedSequence> forks;
  /// Speculative decoding: whether this sequence may be given drafted tokens, and its
  /// request's max_tokens and min_tokens, which bound them (every verified row must fit in
  /// max_tokens and lie on one side of min_tokens).
  bool speculate = false;
  int64_t max_tokens = std::numeric_limits<int64_t>::max() / 4;
  int64_t min_tokens = 0;
};

/// vLLM-style scheduling with chunked prefill, recompute pre-emption, automatic prefix
/// caching and forks (docs/architecture.md §8). Each step:
/// running sequences first (oldest first), each taking min(pending tokens, budget left)
/// — a decode is one token, a prompt is cut into chunks of the step's token budget;
/// when a sequence needs a block and none is free, the newest running sequence is
/// pre-empted: its blocks are freed and it goes back to the front of the waiting queue
/// with everything it has generated, to be recomputed later (never dropped). Then
/// waiting sequences are admitted first come, first served, while the budget, the
/// running limit and free blocks (less a 1% watermark kept for running decodes) allow.
///
/// Prefix caching: every full block a sequence has computed is entered in the prefix
/// cache under its chained key (prefix_cache.h); a sequence admitted with nothing
/// computed takes references to the cached blocks of its longest cached prefix — never
/// the block of its last token, whose logits must be computed — and prefills the rest.
/// A sequence's first block is keyed with its cache_salt too, so sequences of different
/// salts (different interventions, docs/architecture.md §13) share no cached block.
/// Blocks are reference-counted; a cached block nobody holds stays cached and counts as
/// free (kv_usage, the watermark) until the allocator evicts it, least recently used.
///
/// Forks (a request's n > 1 choices): add(seq, forks) queues seq alone; once seq has
/// computed its prompt but the last token (L−1 positions), each fork takes references to
/// seq's full blocks below position L−1 and a block of its own for position L−1 on —
/// a copy of seq's block there when that block is partial (copy-on-write: a BlockCopy in
/// the next plan, applied before its forward) — and joins the running batch (while the
/// running limit and free blocks allow; else it waits in seq) to compute position L−1
/// itself: its own logits, its own draws. A waiting sequence holds no blocks; a sequence
/// never writes into a block that another holds or that is cached.
///
/// Speculative decoding (options.num_speculative_tokens = K > 0): after the running
/// sequences have their tokens, each decoding sequence that may speculate (speculate set,
/// no forks to make) is given room for up to K drafted tokens (PlannedSequence::lookahead)
/// from the budget left and the blocks free beyond the watermark — never by pre-empting —
/// at most max_tokens − generated − 1, and below min_tokens at most min_tokens −
/// generated − 1, so that every verified row is one plain decoding would choose with the
/// same rules. step_done then takes each sequence's emitted tokens (1 … draft + 1) and
/// rolls back the rest: computed counts the accepted positions only, and the blocks past
/// them are released (nothing rejected is ever cached: only computed full blocks are).
///
/// KV groups (options.group_windows; docs/architecture.md §8): every logical block of a
/// sequence takes one id per group from the one allocator, so admission, growth and
/// forks count G ids per block. After each step, in every sliding group, the blocks
/// wholly before the window of the sequence's next position are released (entry −1; a
/// parent with forks to make keeps those of the window of its prompt's last position,
/// which the forks compute). Pre-emption, removal and the end release every id held.
/// Forks share each group's blocks (−1 stays −1) and copy each group's partial block.
/// Prefix caching keys group 0's blocks (a full group) by the token chain and every other
/// group's block by group 0's identity at its place; a hit of P blocks needs every
/// block before P in full groups and, in sliding groups, those the window of position
/// P·block_size sees (vLLM's rule); the sequence holds −1 before them. A model whose every
/// layer is sliding (group 0 sliding) has no prefix caching. With one group everything is
/// as above.
/// Not thread-safe (the engine thread owns it).
class Scheduler {
 public:
  /// Throws InputError for options that cannot work (no blocks, max_batch_tokens <
  /// max_running, micro_batches < 1).
  explicit Scheduler(const SchedulerOptions& options);

  /// Queues a new sequence (tokens = its prompt, non-empty) at the back. `forks`: more
  /// sequences of the same prompt (each with its id and selection; tokens and prompt_len
  /// are taken from seq) that fork from seq as the class comment says; with a one-token
  /// prompt there is nothing to share and they queue after seq as they are.
  void add(SchedSequence seq, std::vector<SchedSequence> forks = {});
  /// Drops a sequence wherever it is (running, waiting, or a fork not yet made) and
  /// releases its blocks; forks still waiting for it queue on their own (front of the
  /// queue, nothing computed). False when unknown.
  bool remove(int64_t id);
  /// The next step's plan; no sequences when nothing can run.
  StepPlan schedule();
  /// Applies a step's outcome: planned positions are now cached (their full blocks enter
  /// the prefix cache), every sampled sequence gets its token appended (tokens in plan
  /// order of the sampled entries), and forks whose parent is far enough are made.
  void step_done(const StepPlan& plan, const std::vector<SelectedToken>& tokens);
  /// The same with speculative decoding: `emitted` has one list per plan sequence (empty
  /// for those not sampled): the tokens a sampled sequence emitted, 1 … draft + 1
  /// (speculative/verification.h); empty for a drafted one means nothing was taken (the
  /// step is redone without drafts: the sequence speculates no more). Throws Error for
  /// lists of other counts.
  void step_done(const StepPlan& plan, const std::vector<std::vector<SelectedToken>>& emitted);

  const SchedSequence* find(int64_t id) const;
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  /// Share of blocks held by sequences, 0 … 1 (cached blocks nobody holds count as free).
  double kv_usage() const;
  int64_t free_blocks() const { return allocator_.free_count(); }
  int64_t preemptions() const { return preemptions_; }
  /// Prefix caching, since start, in tokens (as vLLM's prefix_cache_queries and
  /// prefix_cache_hits): tokens of the sequences admitted with nothing computed (that
  /// may read the cache), and of those, the tokens found in the cache. 0 with prefix
  /// caching off.
  int64_t prefix_cache_queries() const { return cache_queries_; }
  int64_t prefix_cache_hits() const { return cache_hits_; }
  const BlockAllocator& blocks() const { return allocator_; }
  /// The options in force (prefix_caching false when group 0 is sliding).
  const SchedulerOptions& options() const { return opt_; }
  /// KV groups (≥ 1).
  int64_t groups() const { return groups_; }
  /// Block ids held in group `group` by every running sequence (an id shared by forks
  /// counts once per sequence).
  int64_t held_in_group(int64_t group) const;

 private:
  void preempt(SchedSequence& seq);
  /// Appends `add` logical blocks (G·add ids) to s's tables; false (taking none) when
  /// fewer ids are free.
  bool grow(SchedSequence& s, int64_t add);
  /// Releases every id s holds and empties its table.
  void release_all(SchedSequence& s);
  /// Releases s's logical blocks from `keep` on (every group's).
  void truncate(SchedSequence& s, int64_t keep);
  /// Gives the decoding sequences of `plan` room for drafted tokens (the class comment).
  void grant_lookahead(StepPlan& plan, int64_t& budget);
  /// In every sliding group, releases s's blocks wholly before the window of position
  /// `next` (sets them to −1).
  void release_before_window(SchedSequence& s, int64_t next);
  /// A cached prefix of P full blocks: group 0's identities of blocks 0 … P−1, and the
  /// block table (G tables of P entries) a sequence starting there takes: every block in
  /// full groups, in sliding groups those its window sees from position P·block_size on
  /// (−1 before).
  struct PrefixHit {
    std::vector<CachedBlock> chain;
    std::vector<int32_t> table;
  };
  /// seq's longest cached prefix, at most (tokens − 1) / block_size blocks, that every
  /// group can serve (vLLM's rule for hybrid models).
  PrefixHit cached_prefix(const SchedSequence& seq) const;
  /// Enters seq's computed full blocks not yet in seq.cached into the prefix cache: group
  /// 0's under the chained token key, every other group's under group 0's identity.
  void cache_full_blocks(SchedSequence& seq);
  /// Makes the forks of `parent` that its computed positions, the free blocks and the
  /// running limit allow, appending them to `made`.
  void fork(SchedSequence& parent, std::vector<SchedSequence>& made);
  /// Moves parent's unmade forks to the front of the queue, to run on their own.
  void orphan_forks(SchedSequence& parent);

  SchedulerOptions opt_;
  BlockAllocator allocator_;
  std::vector<SchedSequence> running_;  // oldest first
  std::deque<SchedSequence> waiting_;
  std::vector<BlockCopy> copies_;  // for the next plan with sequences
  int64_t preemptions_ = 0, cache_queries_ = 0, cache_hits_ = 0;
  int64_t groups_ = 1;
};

}  // namespace olmo2
