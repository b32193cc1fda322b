#include "runtime/serve/speculative/draft_model_proposer.h"

#include <algorithm>

#include "runtime/generation/token_selection.h"

namespace olmo2 {

DraftModelProposer::DraftModelProposer(std::unique_ptr<Olmo2Model> model, int64_t num_blocks, int64_t block_size,
                                       std::optional<DType> kv_dtype)
    : model_(std::move(model)),
      cache_(model_->config(), model_->shard(), num_blocks, block_size, model_->device(),
             kv_cache_dtype(kv_dtype, model_->precision())),
      groups_(std::max<int64_t>(1, cache_.layout().groups())) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::string DraftModelProposer::describe() const {
  const ModelConfig& c = model_->config();
  return "a draft model of " + std::to_string(c.num_hidden_layers) + " layers, hidden " +
         std::to_string(c.hidden_size) + " (" + std::to_string(cache_.num_blocks()) + " KV blocks of its own)";
}

bool DraftModelProposer::reserve(State& s, int64_t positions) {
  const int64_t have = static_cast<int64_t>(s.blocks.size()) / groups_;
  const int64_t add = blocks_for(positions, cache_.block_size()) - have;
  if (add <= 0) return true;
  if (add * groups_ > static_cast<int64_t>(free_.size())) return false;
  std::vector<int32_t> grown;
  grown.reserve(static_cast<size_t>((have + add) * groups_));
  for (int64_t g = 0; g < groups_; ++g) {
    grown.insert(grown.end(), s.blocks.begin() + g * have, s.blocks.begin() + (g + 1) * have);
    for (int64_t b = 0; b < add; ++b) grown.push_back(free_.back()), free_.pop_back();
  }
  s.blocks = std::move(grown);
  return true;
}

void DraftModelProposer::drop(std::map<int64_t, State>::iterator it) {
  free_.insert(free_.end(), it->second.blocks.begin(), it->second.blocks.end());
  states_.erase(it);
}

void DraftModelProposer::release(int64_t seq_id) {
  const auto it = states_.find(seq_id);
  if (it != states_.end()) drop(it);
}

std::vector<int32_t> DraftModelProposer::step(const std::vector<State*>& states,
                                              const std::vector<std::vector<int32_t>>& chunks) {
  TokenBatch batch;
  for (size_t i = 0; i < states.size(); ++i) {
    batch.tokens.emplace_back(chunks[i]);
    batch.start.push_back(static_cast<int64_t>(states[i]->fed.size()));
    batch.block_tables.emplace_back(states[i]->blocks);
  }
  ForwardOptions fo;
  fo.last_logits_only = true;
  fo.batch_invariant = true;
  fo.vocab_parallel_logits = true;
  const ForwardResult out = model_->forward(batch, &cache_, fo);
  std::vector<TensorView> rows;
  std::vector<SelectionRequest> greedy(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    rows.push_back(out.logits[i].view());
    greedy[i].params.temperature = 0;
    states[i]->fed.insert(states[i]->fed.end(), chunks[i].begin(), chunks[i].end());
  }
  const std::vector<SelectedToken> picked = select_tokens(rows, model_->shard(), greedy, nullptr);
  std::vector<int32_t> ids;
  for (const SelectedToken& t : picked) ids.push_back(t.id);
  return ids;
}

std::vector<std::vector<int32_t>> DraftModelProposer::propose(std::span<const DraftSlot> slots) {
  std::vector<std::vector<int32_t>> out(slots.size());
  std::vector<State*> states;
  std::vector<size_t> slot_of;
  std::vector<std::vector<int32_t>> chunks;
  const int64_t limit = model_->config().max_position_embeddings;
  for (size_t i = 0; i < slots.size(); ++i) {
    const DraftSlot& d = slots[i];
    const int64_t len = static_cast<int64_t>(d.tokens.size());
    if (len < 1 || d.max < 1 || len + d.max - 1 > limit) continue;
    State& s = states_[d.seq_id];
    // Rollback: keep the fed tokens still equal to the sequence's; the last token is fed
    // again when needed, since its logits give the first drafted token.
    const auto [mismatch, unused] = std::mismatch(s.fed.begin(), s.fed.end(), d.tokens.begin(), d.tokens.end());
    (void)unused;
    s.fed.resize(std::min<size_t>(static_cast<size_t>(mismatch - s.fed.begin()), static_cast<size_t>(len - 1)));
    if (!reserve(s, len + d.max - 1)) {  // fed again later, when blocks are free
      drop(states_.find(d.seq_id));
      continue;
    }
    states.push_back(&s);
    slot_of.push_back(i);
    chunks.emplace_back(d.tokens.begin() + static_cast<std::ptrdiff_t>(s.fed.size()), d.tokens.end());
  }
  // Drafted token k + 1 of every slot that wants it, one forward each.
  for (int32_t k = 0; !states.empty(); ++k) {
    const std::vector<int32_t> next = step(states, chunks);
    std::vector<State*> more;
    std::vector<size_t> more_slot;
    std::vector<std::vector<int32_t>> more_chunks;
    for (size_t j = 0; j < states.size(); ++j) {
      std::vector<int32_t>& o = out[slot_of[j]];
      o.push_back(next[j]);
      if (static_cast<int32_t>(o.size()) < slots[slot_of[j]].max) {
        more.push_back(states[j]);
        more_slot.push_back(slot_of[j]);
        more_chunks.push_back({next[j]});
      }
    }
    states = std::move(more);
    slot_of = std::move(more_slot);
    chunks = std::move(more_chunks);
  }
  return out;
}

}  // namespace olmo2
