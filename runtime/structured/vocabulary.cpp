// The model's vocabulary as the matcher sees it (docs/architecture.md §8, "Structured
// outputs"): each token's bytes and a byte trie over the tokens that may appear in a
// constrained output, laid out depth first so that a mask walk reads it in order.
#include <algorithm>
#include <atomic>

#include "runtime/structured/grammar_impl.h"

namespace olmo2::structured {
namespace {

using Impl = Vocabulary::Impl;

/// Builds the node for the sorted entries [lo, hi) sharing their first `depth` bytes;
/// returns its index. Its children's slots are reserved before they are built, so each
/// node's children are contiguous.
uint32_t build(Impl& v, const std::vector<std::pair<std::string_view, int32_t>>& items, size_t lo, size_t hi, size_t depth) {
  const auto node = static_cast<uint32_t>(v.nodes.size());
  v.nodes.push_back({0, 0, static_cast<uint32_t>(v.token_ids.size()), 0});
  while (lo < hi && items[lo].first.size() == depth) {
    v.token_ids.push_back(items[lo++].second);
    ++v.nodes[node].n_tokens;
  }
  std::vector<std::pair<size_t, size_t>> groups;  // [begin, end) per next byte
  for (size_t i = lo; i < hi;) {
    size_t j = i + 1;
    while (j < hi && items[j].first[depth] == items[i].first[depth]) ++j;
    groups.emplace_back(i, j);
    i = j;
  }
  const auto first = static_cast<uint32_t>(v.child_byte.size());
  v.nodes[node].first_child = first;
  v.nodes[node].n_children = static_cast<uint32_t>(groups.size());
  v.child_byte.resize(first + groups.size());
  v.child_node.resize(first + groups.size());
  for (size_t k = 0; k < groups.size(); ++k) {
    v.child_byte[first + k] = static_cast<uint8_t>(items[groups[k].first].first[depth]);
    const uint32_t child = build(v, items, groups[k].first, groups[k].second, depth + 1);
    v.child_node[first + k] = child;
  }
  return node;
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> bytes, std::vector<int32_t> excluded, std::vector<int32_t> eos)
    : impl_(std::make_unique<Impl>()) {
  static std::atomic<uint64_t> next_serial{1};
  Impl& v = *impl_;
  v.serial = next_serial++;
  const auto n = static_cast<int64_t>(bytes.size());
  v.allowed.assign(bytes.size(), 1);
  v.is_eos.assign(bytes.size(), 0);
  for (int32_t id : excluded) {
    if (id < 0 || id >= n) OLMO2_THROW(InputError, "Vocabulary: excluded token id ", id, " outside [0, ", n, ")");
    v.allowed[static_cast<size_t>(id)] = 0;
  }
  for (int32_t id : eos) {
    if (id < 0 || id >= n) OLMO2_THROW(InputError, "Vocabulary: EOS token id ", id, " outside [0, ", n, ")");
    v.is_eos[static_cast<size_t>(id)] = 1;
    v.allowed[static_cast<size_t>(id)] = 0;  // EOS follows its own rule (complete())
  }
  for (size_t id = 0; id < bytes.size(); ++id)
    if (bytes[id].empty()) v.allowed[id] = 0;  // a token without bytes would fit anywhere
  v.bytes = std::move(bytes);
  v.eos = std::move(eos);

  std::vector<std::pair<std::string_view, int32_t>> items;
  for (size_t id = 0; id < v.bytes.size(); ++id)
    if (v.allowed[id]) items.emplace_back(v.bytes[id], static_cast<int32_t>(id));
  std::sort(items.begin(), items.end());
  for (const auto& item : items) v.max_token_bytes = std::max(v.max_token_bytes, item.first.size());
  build(v, items, 0, items.size(), 0);
}

Vocabulary::~Vocabulary() = default;

int64_t Vocabulary::size() const { return static_cast<int64_t>(impl_->bytes.size()); }

const std::vector<int32_t>& Vocabulary::eos() const { return impl_->eos; }

}  // namespace olmo2::structured
