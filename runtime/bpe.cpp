#include "runtime/bpe.h"

#include <climits>

#include "ops/error.h"

namespace olmo2 {

Bpe::Bpe(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
         bool ignore_merges)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  for (size_t id = 0; id < vocab_.size(); ++id) {
    if (!vocab_[id].empty()) ids_.emplace(vocab_[id], static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const int32_t id = find(std::string(1, static_cast<char>(b)));
    if (id < 0) OLMO2_THROW(InputError, "tokenizer vocabulary has no token for byte ", b);
    byte_id_[b] = id;
  }
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [l, rt] = merges[r];
    const int32_t a = find(l), b = find(rt), m = find(l + rt);
    if (a < 0 || b < 0 || m < 0) {
      OLMO2_THROW(InputError, "tokenizer merge ", r, " joins tokens that are not in the vocabulary");
    }
    merges_.emplace(key(a, b), Merge{static_cast<int32_t>(r), m});  // first rank wins
  }
}

int32_t Bpe::find(std::string_view bytes) const {
  auto it = ids_.find(std::string(bytes));
  return it == ids_.end() ? -1 : it->second;
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = find(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> sym(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) sym[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  // ranks[i]: merge of (sym[i], sym[i+1]), INT_MAX when none.
  std::vector<int32_t> ranks(sym.size(), INT_MAX), results(sym.size(), -1);
  auto look = [&](size_t i) {
    ranks[i] = INT_MAX;
    if (i + 1 >= sym.size()) return;
    auto it = merges_.find(key(sym[i], sym[i + 1]));
    if (it != merges_.end()) ranks[i] = it->second.rank, results[i] = it->second.result;
  };
  for (size_t i = 0; i < sym.size(); ++i) look(i);
  while (sym.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < sym.size(); ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == INT_MAX) break;
    sym[best] = results[best];
    sym.erase(sym.begin() + static_cast<ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<ptrdiff_t>(best) + 1);
    results.erase(results.begin() + static_cast<ptrdiff_t>(best) + 1);
    look(best);
    if (best > 0) look(best - 1);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

}  // namespace olmo2
