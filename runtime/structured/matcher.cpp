// The matcher (docs/architecture.md §8, "Structured outputs"): a set of parse stacks over
// the byte-level grammar, advanced one byte at a time. A stack's top is a terminal
// position; a byte it matches moves that position on, and the stack is expanded again
// with the precomputed closures until every top is a terminal. No left recursion (refused
// at compile time) keeps each expansion finite.
#include <algorithm>
#include <cstring>
#include <limits>

#include "runtime/structured/grammar_impl.h"

namespace olmo2::structured {
namespace {

inline void emit(const uint32_t* base, uint32_t base_len, const uint32_t* frames, uint32_t n, StateBuf& out) {
  out.data.push_back(base_len + n);
  out.data.insert(out.data.end(), base, base + base_len);
  out.data.insert(out.data.end(), frames, frames + n);
  ++out.count;
}

}  // namespace

void expand_position(const Grammar::Impl& g, const uint32_t* base, uint32_t base_len, uint32_t p, StateBuf& out) {
  while (true) {
    const uint32_t e = g.elems[p];
    const uint32_t kind = e & kKindMask;
    if (kind == kTerm) {
      emit(base, base_len, &p, 1, out);
      return;
    }
    if (kind == kRef) {
      const uint32_t* c = g.closure_pool.data() + g.closure_begin[p];
      const uint32_t* end = g.closure_pool.data() + g.closure_begin[p + 1];
      while (c < end) {
        emit(base, base_len, c + 1, *c, out);
        c += *c + 1;
      }
      if (!g.nullable[p]) return;
    }
    // The rest of this frame can be empty: go on in the frame below.
    if (base_len == 0) {
      emit(base, 0, nullptr, 0, out);
      return;
    }
    p = base[--base_len];
  }
}

void canonicalize(StateBuf& s, AdvanceScratch& scratch) {
  if (s.count <= 1) return;
  auto& offs = scratch.offsets;
  offs.clear();
  for (uint32_t i = 0, k = 0; k < s.count; ++k, i += s.data[i] + 1) offs.push_back(i);
  const uint32_t* d = s.data.data();
  auto less = [d](uint32_t a, uint32_t b) {
    if (d[a] != d[b]) return d[a] < d[b];
    return std::lexicographical_compare(d + a + 1, d + a + 1 + d[a], d + b + 1, d + b + 1 + d[b]);
  };
  auto same = [d](uint32_t a, uint32_t b) { return d[a] == d[b] && std::equal(d + a + 1, d + a + 1 + d[a], d + b + 1); };
  std::sort(offs.begin(), offs.end(), less);
  offs.erase(std::unique(offs.begin(), offs.end(), same), offs.end());
  auto& tmp = scratch.tmp;
  tmp.clear();
  for (uint32_t o : offs) tmp.insert(tmp.end(), d + o, d + o + d[o] + 1);
  s.data.swap(tmp);
  s.count = static_cast<uint32_t>(offs.size());
}

void advance_state(const Grammar::Impl& g, const StateBuf& in, uint8_t b, StateBuf& out, AdvanceScratch& scratch) {
  out.clear();
  const uint32_t* d = in.data.data();
  for (uint32_t i = 0, k = 0; k < in.count; ++k, i += d[i] + 1) {
    const uint32_t len = d[i];
    if (len == 0) continue;
    const uint32_t top = d[i + len];
    if (!byteset_has(g.sets[g.elems[top] & ~kKindMask], b)) continue;
    expand_position(g, d + i + 1, len - 1, top + 1, out);
  }
  canonicalize(out, scratch);
  if (out.count > kMaxStacks)
    OLMO2_CONSTRAINT_ERROR("grammar", "grammar too ambiguous: more than ", kMaxStacks, " parse stacks after one byte");
}

ByteSet next_bytes(const Grammar::Impl& g, const StateBuf& s) {
  ByteSet out{};
  const uint32_t* d = s.data.data();
  for (uint32_t i = 0, k = 0; k < s.count; ++k, i += d[i] + 1) {
    if (d[i] == 0) continue;
    const ByteSet& t = g.sets[g.elems[d[i + d[i]]] & ~kKindMask];
    for (int w = 0; w < 4; ++w) out[w] |= t[w];
  }
  return out;
}

int64_t state_min_bytes(const Grammar::Impl& g, const StateBuf& s) {
  int64_t best = std::numeric_limits<int64_t>::max();
  const uint32_t* d = s.data.data();
  for (uint32_t i = 0, k = 0; k < s.count; ++k, i += d[i] + 1) {
    int64_t sum = 0;
    for (uint32_t f = 0; f < d[i]; ++f) sum += g.suffix_min[d[i + 1 + f]];
    best = std::min(best, sum);
  }
  return best;
}

bool state_complete(const StateBuf& s) {
  const uint32_t* d = s.data.data();
  for (uint32_t i = 0, k = 0; k < s.count; ++k, i += d[i] + 1)
    if (d[i] == 0) return true;
  return false;
}

// ---- Grammar ----------------------------------------------------------------------------

Grammar::Grammar() : impl_(std::make_unique<Impl>()) {}
Grammar::~Grammar() = default;

std::shared_ptr<const Grammar> Grammar::parse(const std::string& text) {
  std::shared_ptr<Grammar> g(new Grammar());
  compile_grammar(parse_grammar_text(text), *g->impl_);
  StateBuf start;
  expand_position(*g->impl_, nullptr, 0, 0, start);
  AdvanceScratch scratch;
  canonicalize(start, scratch);
  g->impl_->initial = std::move(start.data);
  g->impl_->initial_count = start.count;
  return g;
}

// ---- Matcher ------------------------------------------------------------------------------

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), state_(std::make_unique<State>()) {
  if (!grammar_) OLMO2_THROW(ShapeError, "Matcher: no grammar");
  state_->stacks.data = grammar_->impl().initial;
  state_->stacks.count = grammar_->impl().initial_count;
}

Matcher::Matcher(const Matcher& o)
    : grammar_(o.grammar_), vocabulary_(o.vocabulary_), state_(std::make_unique<State>(*o.state_)) {}

Matcher& Matcher::operator=(const Matcher& o) {
  if (this != &o) {
    grammar_ = o.grammar_;
    vocabulary_ = o.vocabulary_;
    state_ = std::make_unique<State>(*o.state_);
  }
  return *this;
}

Matcher::~Matcher() = default;

bool Matcher::accept_bytes(std::string_view bytes) {
  if (state_->terminated) return false;
  if (bytes.empty()) return true;
  thread_local AdvanceScratch scratch;
  StateBuf cur = state_->stacks, next;
  for (unsigned char b : bytes) {
    advance_state(grammar_->impl(), cur, b, next, scratch);
    if (next.count == 0) return false;
    std::swap(cur, next);
  }
  state_->stacks = std::move(cur);
  return true;
}

bool Matcher::accept(int32_t id) {
  if (state_->terminated || !vocabulary_) return false;
  const auto& v = vocabulary_->impl();
  if (id < 0 || id >= static_cast<int64_t>(v.bytes.size())) return false;
  if (v.is_eos[static_cast<size_t>(id)]) {
    if (!complete()) return false;
    state_->terminated = true;
    return true;
  }
  if (!v.allowed[static_cast<size_t>(id)]) return false;
  return accept_bytes(v.bytes[static_cast<size_t>(id)]);
}

bool Matcher::complete() const { return state_complete(state_->stacks); }

bool Matcher::closed() const {
  const auto& s = state_->stacks;
  return state_->terminated || (s.count == 1 && s.data[0] == 0);
}

bool Matcher::terminated() const { return state_->terminated; }

int64_t Matcher::min_bytes_to_complete() const { return state_min_bytes(grammar_->impl(), state_->stacks); }

}  // namespace olmo2::structured
