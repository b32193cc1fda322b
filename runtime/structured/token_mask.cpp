// Token masks (docs/architecture.md §8, "Structured outputs"): the tokens that may come
// next after a matcher state, found by a depth-first walk of the vocabulary's byte trie
// that advances the state one byte per trie edge and skips every subtree whose first
// byte no stack accepts. Cached per canonical state in the grammar (LRU, bounded by
// bytes); the length rule and EOS are applied per call on top of the cached mask.
#include <algorithm>
#include <cstring>

#include "runtime/structured/grammar_impl.h"

namespace olmo2::structured {
namespace {

class Walk {
 public:
  Walk(const Grammar::Impl& g, const Vocabulary::Impl& v, MaskCacheEntry& e) : g_(g), v_(v), e_(e) {
    states_.resize(v.max_token_bytes + 2);
  }

  /// Walks the whole trie from `start`; fills the entry.
  void run(const StateBuf& start) {
    states_[0] = start;
    visit(0, 0);
    std::sort(after_.begin(), after_.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    for (const auto& [m, id] : after_) {
      if (e_.groups.empty() || e_.groups.back().first != m) e_.groups.emplace_back(m, 0);
      e_.ids.push_back(id);
      e_.groups.back().second = static_cast<uint32_t>(e_.ids.size());
    }
    e_.max_after = after_.empty() ? 0 : after_.front().first;
  }

 private:
  void visit(uint32_t node, size_t depth) {
    const ByteSet next = next_bytes(g_, states_[depth]);
    const auto& n = v_.nodes[node];
    for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
      const uint8_t b = v_.child_byte[c];
      if (!byteset_has(next, b)) continue;
      StateBuf& t = states_[depth + 1];
      advance_state(g_, states_[depth], b, t, scratch_);
      if (t.count == 0) continue;
      const auto& child = v_.nodes[v_.child_node[c]];
      if (child.n_tokens) {
        const int64_t m = state_min_bytes(g_, t);
        for (uint32_t k = child.first_token; k < child.first_token + child.n_tokens; ++k) {
          const int32_t id = v_.token_ids[k];
          e_.bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
          if (m > 0) after_.emplace_back(m, id);
        }
      }
      if (child.n_children) visit(v_.child_node[c], depth + 1);
    }
  }

  const Grammar::Impl& g_;
  const Vocabulary::Impl& v_;
  MaskCacheEntry& e_;
  std::vector<StateBuf> states_;
  AdvanceScratch scratch_;
  std::vector<std::pair<int64_t, int32_t>> after_;
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
  if (!state_->terminated && remaining >= 1) {
    const auto entry = mask_entry(grammar_->impl(), v, state_->stacks);
    std::copy(entry->bits.begin(), entry->bits.end(), bits.begin());
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
  if (complete())
    for (int32_t id : v.eos) bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
}

}  // namespace olmo2::structured
