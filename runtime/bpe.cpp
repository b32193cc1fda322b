#include "runtime/bpe.h"

#include <queue>

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
  const size_t n = piece.size();
  if (n == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  // Symbols form a doubly linked list over the piece's byte positions: a live symbol
  // starting at byte p spans [p, p + len) and its right neighbour starts at p + len.
  // Merging absorbs the right symbol into the left one (id −1 marks it dead), so a
  // symbol's id only ever changes to a longer token's id and never returns.
  struct Symbol {
    int32_t id;
    size_t len;
    size_t prev;  // start of the left neighbour (unused at position 0, always the first)
  };
  // A merge of the adjacent pair starting at `pos`, valid while the symbols at `pos`
  // and at its right neighbour still have the ids `left` and `right` (lazy deletion).
  struct Candidate {
    int32_t rank;
    int32_t result;
    size_t pos;
    int32_t left, right;
  };
  // Min-heap on (rank, pos): lowest rank first, leftmost among equal ranks.
  struct Later {
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    }
  };
  std::vector<Symbol> sym(n);
  for (size_t i = 0; i < n; ++i) sym[i] = Symbol{byte_id_[static_cast<unsigned char>(piece[i])], 1, i - 1};
  std::vector<Candidate> heap;
  heap.reserve(n);
  auto candidate = [&](size_t p, auto&& emit) {
    const size_t q = p + sym[p].len;
    if (q >= n) return;
    auto it = merges_.find(key(sym[p].id, sym[q].id));
    if (it != merges_.end()) emit(Candidate{it->second.rank, it->second.result, p, sym[p].id, sym[q].id});
  };
  for (size_t i = 0; i + 1 < n; ++i) candidate(i, [&](const Candidate& c) { heap.push_back(c); });
  std::priority_queue<Candidate, std::vector<Candidate>, Later> queue(Later{}, std::move(heap));
  auto push = [&](const Candidate& c) { queue.push(c); };
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.pos];
    if (l.id != c.left) continue;  // the left symbol merged or was absorbed since
    const size_t q = c.pos + l.len;
    if (q >= n || sym[q].id != c.right) continue;  // the right symbol merged since
    l.id = c.result;
    l.len += sym[q].len;
    sym[q].id = -1;
    if (const size_t r = c.pos + l.len; r < n) sym[r].prev = c.pos;
    if (c.pos > 0) candidate(l.prev, push);
    candidate(c.pos, push);
  }
  for (size_t p = 0; p < n; p += sym[p].len) out.push_back(sym[p].id);
}

}  // namespace olmo2
