#include "runtime/bpe.h"

#include <algorithm>

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
  // Symbols form a linked list over the piece's byte positions: a live symbol starting
  // at byte p spans [p, p + len), its right neighbour starts at p + len and its left
  // one at prev. A merge absorbs the right symbol into the left one (id −1 marks it
  // dead), so a live symbol only ever grows and a dead one never returns.
  struct Symbol {
    int32_t id;
    size_t len;
    size_t prev;  // unused at position 0, which is always the first symbol
  };
  // The merge of the symbol at `pos` with its right neighbour, pushed when both ended
  // where they do now: it is stale (skipped when popped) unless the symbol at `pos` is
  // live and it and its neighbour together still span [pos, end).
  struct Candidate {
    int32_t rank;
    int32_t result;
    size_t pos;
    size_t end;
  };
  // Heap order: the top is the lowest rank, the leftmost among equal ranks.
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  // Every merge pops one candidate and pushes at most two, so the heap never holds more
  // than the n − 1 initial candidates plus one per merge: under 2n.
  constexpr size_t kSmall = 64;
  Symbol small_sym[kSmall];
  Candidate small_heap[2 * kSmall];
  std::vector<Symbol> big_sym;
  std::vector<Candidate> big_heap;
  Symbol* sym = small_sym;
  Candidate* heap = small_heap;
  if (n > kSmall) {
    big_sym.resize(n);
    big_heap.resize(2 * n);
    sym = big_sym.data();
    heap = big_heap.data();
  }
  size_t heap_size = 0;
  for (size_t i = 0; i < n; ++i) sym[i] = Symbol{byte_id_[static_cast<unsigned char>(piece[i])], 1, i - 1};
  // Appends the candidate merge of the live symbol at p and its right neighbour, if any.
  auto add = [&](size_t p) {
    const size_t q = p + sym[p].len;
    if (q >= n) return false;
    auto it = merges_.find(key(sym[p].id, sym[q].id));
    if (it == merges_.end()) return false;
    heap[heap_size++] = Candidate{it->second.rank, it->second.result, p, q + sym[q].len};
    return true;
  };
  for (size_t i = 0; i + 1 < n; ++i) add(i);
  std::make_heap(heap, heap + heap_size, later);
  while (heap_size > 0) {
    std::pop_heap(heap, heap + heap_size, later);
    const Candidate c = heap[--heap_size];
    Symbol& l = sym[c.pos];
    if (l.id < 0) continue;  // absorbed into its left neighbour since
    const size_t q = c.pos + l.len;
    if (q >= c.end || q + sym[q].len != c.end) continue;  // either symbol merged since
    l.id = c.result;
    l.len = c.end - c.pos;
    sym[q].id = -1;
    if (c.end < n) sym[c.end].prev = c.pos;
    if (c.pos > 0 && add(l.prev)) std::push_heap(heap, heap + heap_size, later);
    if (add(c.pos)) std::push_heap(heap, heap + heap_size, later);
  }
  for (size_t p = 0; p < n; p += sym[p].len) out.push_back(sym[p].id);
}

}  // namespace olmo2
