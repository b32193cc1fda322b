// A draft model's proposals for speculative decoding, on rank 0 (docs/architecture.md §8).
#pragma once

#include <map>
#include <memory>
#include <optional>

#include "runtime/model/kv_cache.h"
#include "runtime/model/model.h"
#include "runtime/serve/speculative/proposer.h"

namespace olmo2 {

/// A whole (unsharded) draft model with its own paged KV cache proposes greedily: for the
/// slots of a step it first feeds each sequence's tokens the draft has not yet seen (the
/// prompt at first, then the tokens the target emitted last step) as one batched forward
/// whose last rows give every slot's first drafted token, then one batched forward per
/// further drafted token. Its cache keeps, per sequence, the tokens it has fed: the part
/// still equal to the sequence's tokens is reused, the rest (rejected drafts) is
/// overwritten — that is its rollback. The forward is the serving one (batch-invariant
/// products, paged attention), greedy by select_tokens (lowest id among equal maxima).
/// A sequence that finds no free block gets no proposal this step (its blocks are freed,
/// to be fed again later). Source: speculative decoding with a small draft model
/// (Leviathan et al. 2023; Chen et al. 2023).
class DraftModelProposer : public Proposer {
 public:
  /// `model` whole (ShardSpec::whole) on `model->device()`; a cache of `num_blocks` blocks of
  /// `block_size` positions, of `kv_dtype` (nullopt: the draft's precision's,
  /// kv_cache_dtype). Throws InputError for num_blocks < 1, Error when the device is out
  /// of memory.
  DraftModelProposer(std::unique_ptr<Olmo2Model> model, int64_t num_blocks, int64_t block_size,
                     std::optional<DType> kv_dtype = std::nullopt);
  std::vector<std::vector<int32_t>> propose(std::span<const DraftSlot> slots) override;
  void release(int64_t seq_id) override;
  std::string describe() const override;
  const Olmo2Model& model() const { return *model_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

 private:
  struct State {
    std::vector<int32_t> fed;     // tokens whose keys and values are in the cache, in order
    std::vector<int32_t> blocks;  // G group tables of equal length, group after group
  };
  /// Grows s's tables to hold `positions`; false (taking nothing) when blocks are short.
  bool reserve(State& s, int64_t positions);
  void drop(std::map<int64_t, State>::iterator it);
  /// One batched forward of `chunks` (each sequence's new tokens, starting at its fed
  /// length) and the greedy token after each.
  std::vector<int32_t> step(const std::vector<State*>& states, const std::vector<std::vector<int32_t>>& chunks);

  std::unique_ptr<Olmo2Model> model_;
  KVCache cache_;
  int64_t groups_ = 1;
  std::vector<int32_t> free_;
  std::map<int64_t, State> states_;  // by sequence id
};

}  // namespace olmo2
