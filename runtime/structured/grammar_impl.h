// The compiled forms behind constraint.h (docs/architecture.md §8, "Structured outputs"):
// the parsed grammar text, the byte-level grammar the matcher runs, the matcher's state
// (a set of parse stacks) and the vocabulary's token trie. Internal to olmo2_structured.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/structured/constraint.h"

/// Throw ConstraintError at `path` with a message built from the stream-able arguments.
#define OLMO2_CONSTRAINT_ERROR(path, ...) \
  throw ::olmo2::structured::ConstraintError(::olmo2::detail::concat(__VA_ARGS__), (path), __FILE__, __LINE__)

namespace olmo2::structured {

// ---- Grammar text as parsed (grammar_parser.cpp) -------------------------------------

/// One element of a sequence with its repetition: a literal (UTF-8 bytes), a class of
/// code points (ranges, inclusive), a rule reference, or a parenthesized group.
struct AstElement {
  enum class Kind { Literal, Class, Ref, Group } kind = Kind::Literal;
  std::string text;                                   // Literal bytes; Ref name
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // Class
  bool negated = false;                               // Class
  std::vector<std::vector<AstElement>> alternatives;  // Group
  int64_t min = 1, max = 1;                           // repetition; max −1: unbounded
};

struct AstRule {
  std::string name;
  int line = 0;
  std::vector<std::vector<AstElement>> alternatives;
};

/// Parses grammar text into rules (syntax only). Throws ConstraintError naming the line.
std::vector<AstRule> parse_grammar_text(const std::string& text);

// ---- UTF-8 classes (utf8_classes.cpp) -------------------------------------------------

/// A byte range [lo, hi].
struct ByteRange {
  uint8_t lo, hi;
};

/// 256 bits: the bytes a terminal matches.
using ByteSet = std::array<uint64_t, 4>;
inline bool byteset_has(const ByteSet& s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }

/// The UTF-8 encodings of the code points in `ranges` (negated: all scalar values
/// outside them), surrogates never included, as sequences of byte sets: every encoding
/// matches exactly one sequence (one-byte code points in the first, when any).
std::vector<std::vector<ByteSet>> utf8_sequences(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated);

/// Appends the UTF-8 encoding of scalar value `cp` to `out`.
void append_utf8(uint32_t cp, std::string& out);

// ---- The byte-level grammar (grammar_compile.cpp) -------------------------------------

/// Element encoding at a position: the kind in the top two bits, the argument below.
enum : uint32_t { kTerm = 0u << 30, kRef = 1u << 30, kEnd = 2u << 30, kKindMask = 3u << 30 };

/// The most parse stacks a state may hold; past it the grammar is refused as too
/// ambiguous (ConstraintError) instead of growing without bound.
inline constexpr uint32_t kMaxStacks = 4096;

struct MaskCacheEntry;

struct Grammar::Impl {
  // Every alternative of every rule, flattened: a run of elements ending in kEnd.
  // Position 0 is `kRef root`, position 1 its kEnd (the start).
  std::vector<uint32_t> elems;
  std::vector<ByteSet> sets;                // kTerm arguments
  std::vector<std::vector<uint32_t>> alts;  // per rule: its alternatives' first positions
  std::vector<std::string> rule_names;      // per rule (generated ones: "name-N")
  std::vector<int64_t> suffix_min;          // per position: fewest bytes to its kEnd
  // Per position: the stacks that expanding it pushes, as [len, frames…] runs in
  // `closure_pool` from closure_begin[p] to closure_begin[p+1] (kTerm positions: none
  // stored, the position itself is pushed); `nullable` when the rest of its alternative
  // can match nothing, so that expansion goes on in the frame below.
  std::vector<uint32_t> closure_begin;
  std::vector<uint32_t> closure_pool;
  std::vector<uint8_t> nullable;
  std::vector<uint32_t> initial;  // the start state (see StateBuf)
  uint32_t initial_count = 0;

  // Mask cache: canonical state (with the vocabulary's serial) → mask, LRU, bounded by
  // bytes (docs/architecture.md §8).
  mutable std::mutex cache_mutex;
  mutable std::list<std::pair<std::string, std::shared_ptr<const MaskCacheEntry>>> lru;
  mutable std::unordered_map<std::string, decltype(lru)::iterator> cache;
  mutable size_t cache_bytes = 0;
  size_t cache_capacity = size_t{16} << 20;  // × the server's 32 cached grammars: 512 MiB at most (docs/architecture.md §8)
};

/// Lowers parsed rules to the byte-level grammar and checks it: undefined rules, no
/// root, rules that derive no finite string, left recursion. Throws ConstraintError.
void compile_grammar(const std::vector<AstRule>& rules, Grammar::Impl& g);

// ---- Matcher states (matcher.cpp) -----------------------------------------------------

/// A set of parse stacks, canonical (sorted, no duplicates): `count` runs of
/// [len, frame 0 (bottom) … frame len−1 (top)] in `data`. A top frame is a kTerm position;
/// lower frames are return positions; an empty stack means the output is complete.
struct StateBuf {
  std::vector<uint32_t> data;
  uint32_t count = 0;
  void clear() {
    data.clear();
    count = 0;
  }
};

/// Scratch space reused across advances (one per thread or matcher).
struct AdvanceScratch {
  std::vector<uint32_t> offsets;
  std::vector<uint32_t> tmp;
};

/// `out` = the stacks of `in` after byte `b` (empty when `b` cannot come next).
/// Throws ConstraintError when the result holds more than kMaxStacks stacks.
void advance_state(const Grammar::Impl& g, const StateBuf& in, uint8_t b, StateBuf& out, AdvanceScratch& scratch);

/// Appends to `out` the stacks of `base[0, base_len)` with position `p` on top, expanded
/// until each top is a terminal (or the stack is empty). Not canonical: see canonicalize.
void expand_position(const Grammar::Impl& g, const uint32_t* base, uint32_t base_len, uint32_t p, StateBuf& out);

/// Sorts `s`'s stacks and removes duplicates.
void canonicalize(StateBuf& s, AdvanceScratch& scratch);

/// A matcher's state: the stacks, and whether an EOS ended the output.
struct Matcher::State {
  StateBuf stacks;
  bool terminated = false;
};

/// The bytes that some stack of `s` accepts next.
ByteSet next_bytes(const Grammar::Impl& g, const StateBuf& s);

/// Fewest bytes from `s` to a complete output (0 when complete; INT64_MAX when empty).
int64_t state_min_bytes(const Grammar::Impl& g, const StateBuf& s);

/// Some stack of `s` is empty.
bool state_complete(const StateBuf& s);

// ---- The vocabulary (vocabulary.cpp) --------------------------------------------------

struct Vocabulary::Impl {
  std::vector<std::string> bytes;
  std::vector<uint8_t> allowed;  // per id: may appear in a constrained output
  std::vector<int32_t> eos;
  std::vector<uint8_t> is_eos;
  size_t max_token_bytes = 0;
  uint64_t serial = 0;  // distinguishes vocabularies in the grammars' mask caches
  // The token trie in depth-first order; node 0 is the root (the empty prefix).
  struct Node {
    uint32_t first_child, n_children;  // into child_byte / child_node
    uint32_t first_token, n_tokens;    // into token_ids: the tokens ending here
  };
  std::vector<Node> nodes;
  std::vector<uint8_t> child_byte;
  std::vector<uint32_t> child_node;
  std::vector<int32_t> token_ids;
};

// ---- Token masks (token_mask.cpp) -----------------------------------------------------

/// The tokens allowed after one state, without the length rule; plus, for the length
/// rule, the allowed ids with min_bytes_to_complete ≥ 1 after them, by that value
/// descending (`groups`: (value, end index into ids)).
struct MaskCacheEntry {
  std::vector<uint64_t> bits;
  std::vector<int32_t> ids;
  std::vector<std::pair<int64_t, uint32_t>> groups;
  int64_t max_after = 0;  // largest min_bytes_to_complete after an allowed token
  size_t footprint() const { return bits.size() * 8 + ids.size() * 4 + groups.size() * 16 + 64; }
};

/// The cached (or now computed and cached) mask entry of state `s`.
std::shared_ptr<const MaskCacheEntry> mask_entry(const Grammar::Impl& g, const Vocabulary::Impl& v, const StateBuf& s);

}  // namespace olmo2::structured
