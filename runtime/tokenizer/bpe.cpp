#include "runtime/tokenizer/bpe.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <queue>

#include "core/error.h"

namespace olmo2 {

namespace {

/// Pieces up to this many bytes (nearly all of them) take merge_short.
constexpr size_t kShort = 64;

/// The BPE of `piece` (2 … kShort bytes) from its byte ids, by the textbook loop on the
/// stack: rescan every adjacent pair for the lowest rank (the leftmost among equal
/// ranks), merge it, repeat. Quadratic, but n is bounded and nothing is allocated.
/// `lookup(left, right)` gives the Merge of two ids or null.
template <class Lookup>
void merge_short(std::string_view piece, const int32_t* byte_id, const Lookup& lookup, std::vector<int32_t>& out) {
  int32_t sym[kShort], rank[kShort], result[kShort];  // rank[i]: merge of (sym[i], sym[i+1])
  size_t size = piece.size();
  for (size_t i = 0; i < size; ++i) sym[i] = byte_id[static_cast<unsigned char>(piece[i])];
  auto look = [&](size_t i) {
    const auto* m = i + 1 < size ? lookup(sym[i], sym[i + 1]) : nullptr;
    rank[i] = m ? m->rank : INT32_MAX;
    result[i] = m ? m->result : -1;
  };
  for (size_t i = 0; i + 1 < size; ++i) look(i);
  while (size > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < size; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == INT32_MAX) break;
    sym[best] = result[best];
    std::copy(sym + best + 2, sym + size, sym + best + 1);
    std::copy(rank + best + 2, rank + size, rank + best + 1);
    std::copy(result + best + 2, result + size, result + best + 1);
    --size;
    look(best);
    if (best > 0) look(best - 1);
  }
  out.insert(out.end(), sym, sym + size);
}

/// A merge of the symbol starting at byte `pos` with its right neighbour, ending at
/// byte `end` when recorded.
template <class Index>
struct Candidate {
  int32_t rank;
  int32_t result;
  Index pos;
  Index end;
};

/// Min-heap order for std::priority_queue: lowest rank on top, leftmost on equal ranks.
template <class Index>
struct Later {
  bool operator()(const Candidate<Index>& a, const Candidate<Index>& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

/// The same BPE in O(n log n) for a piece of any length ≥ 2 (below the maximum of
/// `Index`), with candidate merges over a linked list of symbols.
///
/// A live symbol starting at byte p spans [p, p + len); its right neighbour starts at
/// p + len and its left one at prev. A merge absorbs the right symbol into the left one
/// (id −1 marks it dead), so a live symbol only ever grows and a dead one never
/// returns. Candidates are not removed when a merge changes their symbols (lazy
/// invalidation): one is skipped when taken unless the symbol at `pos` is live and it
/// and its right neighbour together still span [pos, end) — then both are exactly the
/// symbols it was made for. The valid candidates are always exactly the adjacent pairs
/// that have a merge, so taking the least (rank, pos) each time applies the same merges
/// in the same order as merge_short's rescan.
template <class Index, class Lookup>
void merge_long(std::string_view piece, const int32_t* byte_id, const Lookup& lookup, std::vector<int32_t>& out) {
  struct Symbol {
    int32_t id;
    Index len;
    Index prev;  // unused at position 0, which is always the first symbol
  };
  using C = Candidate<Index>;
  const Index n = static_cast<Index>(piece.size());
  std::unique_ptr<Symbol[]> sym(new Symbol[n]);  // uninitialized until the loop below
  for (Index i = 0; i < n; ++i) sym[i] = Symbol{byte_id[static_cast<unsigned char>(piece[i])], 1, Index(i - 1)};
  // The candidate of the live symbol at p with its right neighbour, if they merge.
  auto candidate = [&](Index p, C& c) {
    const Index q = p + sym[p].len;
    if (q >= n) return false;
    const auto* m = lookup(sym[p].id, sym[q].id);
    if (m == nullptr) return false;
    c = C{m->rank, m->result, p, Index(q + sym[q].len)};
    return true;
  };
  std::vector<C> storage;
  // Never reallocated: n − 1 initial candidates, then each merge pops one and pushes at
  // most two, over at most n − 1 merges.
  storage.reserve(2 * size_t(n));
  for (Index i = 0; i + 1 < n; ++i) {
    if (C c; candidate(i, c)) storage.push_back(c);
  }
  std::priority_queue<C, std::vector<C>, Later<Index>> heap(Later<Index>{}, std::move(storage));
  auto push = [&](Index p) {
    if (C c; candidate(p, c)) heap.push(c);
  };
  while (!heap.empty()) {
    const C c = heap.top();
    heap.pop();
    Symbol& l = sym[c.pos];
    if (l.id < 0) continue;  // absorbed into its left neighbour since
    const Index q = c.pos + l.len;
    if (q >= c.end || q + sym[q].len != c.end) continue;  // it or its right neighbour merged since
    l.id = c.result;
    l.len = c.end - c.pos;
    sym[q].id = -1;
    if (c.end < n) sym[c.end].prev = c.pos;
    if (c.pos > 0) push(l.prev);
    push(c.pos);
  }
  for (Index p = 0; p < n; p += sym[p].len) out.push_back(sym[p].id);
}

}  // namespace

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
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  auto lookup = [this](int32_t a, int32_t b) -> const Merge* {
    auto it = merges_.find(key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  if (piece.size() <= kShort) {
    merge_short(piece, byte_id_, lookup, out);
  } else if (piece.size() < UINT32_MAX) {
    merge_long<uint32_t>(piece, byte_id_, lookup, out);
  } else {
    merge_long<size_t>(piece, byte_id_, lookup, out);
  }
}

}  // namespace olmo2
