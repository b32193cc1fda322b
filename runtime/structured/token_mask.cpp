// Token masks (docs/architecture.md §8, "Structured outputs"): the tokens that may come
// next after a matcher state, found by a depth-first walk of the vocabulary's byte trie
// that advances the state one byte per trie edge and skips every subtree whose first
// byte no stack accepts. Cached per canonical state in the grammar (LRU, bounded by
// bytes); the length rule and EOS are applied per call on top of the cached mask.
#include <bit>
#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "runtime/structured/grammar_impl.h"

namespace olmo2::structured {
namespace {

/// The trie walk. States reached during one walk are interned and their byte
/// transitions memoized (a lazily built DFA over this walk's states): most trie edges
/// lead back to a state already seen (inside a string, every ordinary character returns
/// to the same state), so a walk costs a table lookup per trie edge plus one real
/// advance per distinct (state, byte).
class Walk {
 public:
  Walk(const Grammar::Impl& g, const Vocabulary::Impl& v, MaskCacheEntry& e) : g_(g), v_(v), e_(e) {}

  /// Walks the whole trie from `start`; fills the entry.
  void run(const StateBuf& start) {
    visit(0, intern(start));
    // Group the allowed tokens by the fewest bytes left after them, largest first.
    std::vector<std::pair<int64_t, int32_t>> order;  // (min bytes, state)
    for (size_t i = 0; i < states_.size(); ++i)
      if (states_[i]->min_bytes > 0 && !states_[i]->tokens.empty()) order.emplace_back(states_[i]->min_bytes, static_cast<int32_t>(i));
    std::sort(order.begin(), order.end(), std::greater<>());
    for (const auto& [m, sid] : order) {
      if (e_.groups.empty() || e_.groups.back().first != m) e_.groups.emplace_back(m, 0);
      const auto& tokens = states_[static_cast<size_t>(sid)]->tokens;
      e_.ids.insert(e_.ids.end(), tokens.begin(), tokens.end());
      e_.groups.back().second = static_cast<uint32_t>(e_.ids.size());
    }
    e_.max_after = order.empty() ? 0 : order.front().first;
  }

 private:
  static constexpr int32_t kUnknown = -1, kDead = -2;

  struct Interned {
    StateBuf state;
    ByteSet next;
    int64_t min_bytes;
    std::array<int32_t, 256> step;
    std::vector<int32_t> tokens;  // the allowed tokens that end in this state
  };

  int32_t intern(const StateBuf& s) {
    std::string key(reinterpret_cast<const char*>(s.data.data()), s.data.size() * sizeof(uint32_t));
    auto [it, fresh] = ids_.emplace(std::move(key), static_cast<int32_t>(states_.size()));
    if (fresh) {
      auto st = std::make_unique<Interned>();
      st->state = s;
      st->next = next_bytes(g_, s);
      st->min_bytes = state_min_bytes(g_, s);
      st->step.fill(kUnknown);
      states_.push_back(std::move(st));
    }
    return it->second;
  }

  int32_t step(int32_t from, uint8_t b) {
    int32_t& to = states_[static_cast<size_t>(from)]->step[b];
    if (to != kUnknown) return to;
    advance_state(g_, states_[static_cast<size_t>(from)]->state, b, tmp_, scratch_);
    to = tmp_.count == 0 ? kDead : intern(tmp_);  // the Interned objects never move
    return to;
  }

  void visit(uint32_t node, int32_t sid) {
    const ByteSet next = states_[static_cast<size_t>(sid)]->next;
    const auto& n = v_.nodes[node];
    for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
      const uint8_t b = v_.child_byte[c];
      if (!byteset_has(next, b)) continue;
      const int32_t t = step(sid, b);
      if (t == kDead) continue;
      const auto& child = v_.nodes[v_.child_node[c]];
      if (child.n_tokens) {
        auto& ends = states_[static_cast<size_t>(t)]->tokens;
        for (uint32_t k = child.first_token; k < child.first_token + child.n_tokens; ++k) {
          const int32_t id = v_.token_ids[k];
          e_.bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
          ends.push_back(id);
        }
      }
      if (child.n_children) visit(v_.child_node[c], t);
    }
  }

  const Grammar::Impl& g_;
  const Vocabulary::Impl& v_;
  MaskCacheEntry& e_;
  std::vector<std::unique_ptr<Interned>> states_;
  std::unordered_map<std::string, int32_t> ids_;
  StateBuf tmp_;
  AdvanceScratch scratch_;
};

std::string cache_key(const Vocabulary::Impl& v, const StateBuf& s) {
  std::string key(sizeof(uint64_t) + s.data.size() * sizeof(uint32_t), '\0');
  std::memcpy(key.data(), &v.serial, sizeof(uint64_t));
  if (!s.data.empty()) std::memcpy(key.data() + sizeof(uint64_t), s.data.data(), s.data.size() * sizeof(uint32_t));
  return key;
}

}  // namespace

std::shared_ptr<const MaskCacheEntry> mask_entry(const Grammar::Impl& g, const Vocabulary::Impl& v, const StateBuf& s) {
  std::string key = cache_key(v, s);
  {
    std::lock_guard<std::mutex> lock(g.cache_mutex);
    if (auto it = g.cache.find(key); it != g.cache.end()) {
      g.lru.splice(g.lru.begin(), g.lru, it->second);
      return it->second->second;
    }
  }
  // Computed outside the lock: two threads may compute one state; both results agree.
  auto entry = std::make_shared<MaskCacheEntry>();
  entry->bits.assign((v.bytes.size() + 63) / 64, 0);
  Walk(g, v, *entry).run(s);
  std::lock_guard<std::mutex> lock(g.cache_mutex);
  if (auto it = g.cache.find(key); it != g.cache.end()) return it->second->second;
  g.lru.emplace_front(key, entry);
  g.cache.emplace(std::move(key), g.lru.begin());
  g.cache_bytes += entry->footprint();
  while (g.cache_bytes > g.cache_capacity && g.lru.size() > 1) {
    g.cache_bytes -= g.lru.back().second->footprint();
    g.cache.erase(g.lru.back().first);
    g.lru.pop_back();
  }
  return entry;
}

void Matcher::fill_mask(std::span<uint64_t> bits, int64_t remaining) const {
  if (!vocabulary_) OLMO2_THROW(ShapeError, "Matcher::fill_mask: the matcher has no vocabulary");
  const auto& v = vocabulary_->impl();
  const size_t words = (v.bytes.size() + 63) / 64;
  if (bits.size() < words)
    OLMO2_THROW(ShapeError, "Matcher::fill_mask: ", bits.size(), " words hold fewer bits than the vocabulary's ", v.bytes.size(), " tokens");
  std::fill(bits.begin(), bits.end(), 0);
  const bool done = complete();
  // A budget smaller than the bytes left (tokens carry several bytes, so it may still
  // suffice): only the tokens that make the most progress, those leaving the fewest
  // bytes — a complete output when some token reaches one — so the mask is never empty
  // and the output takes the quickest way to completion.
  const bool short_budget = !done && remaining < min_bytes_to_complete();
  if (short_budget) remaining = std::max<int64_t>(remaining, 1);
  if (!state_->terminated && remaining >= 1) {
    const auto entry = mask_entry(grammar_->impl(), v, state_->stacks);
    std::copy(entry->bits.begin(), entry->bits.end(), bits.begin());
    if (short_budget) {
      int64_t allowed = 0;
      for (uint64_t w : entry->bits) allowed += std::popcount(w);
      const bool completes = allowed > static_cast<int64_t>(entry->ids.size());  // a token whose state is complete
      remaining = 1 + (completes || entry->groups.empty() ? 0 : entry->groups.back().first);
    }
    if (remaining - 1 < entry->max_after) {  // the length rule binds: drop the tokens that leave too much
      uint32_t begin = 0;
      for (const auto& [m, end] : entry->groups) {
        if (m <= remaining - 1) break;
        for (uint32_t k = begin; k < end; ++k) {
          const int32_t id = entry->ids[k];
          bits[static_cast<size_t>(id) >> 6] &= ~(uint64_t{1} << (id & 63));
        }
        begin = end;
      }
    }
  }
  if (done)
    for (int32_t id : v.eos) bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
}

}  // namespace olmo2::structured
