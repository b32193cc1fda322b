// Structured outputs (docs/architecture.md §8, "Structured outputs"): a byte-level
// grammar that a constrained request's output must be a sentence of, the matcher that
// follows one output token by token, and the per-step mask of the tokens that may come
// next. JSON Schema, regex and choice constraints all compile to this grammar's text
// form (a GBNF-like notation), so one matcher serves them all.
//
// Grammar text (the subset of llama.cpp's GBNF this project accepts):
//   rule    ::= NAME "::=" alternatives            (one rule per line or continued after |)
//   element ::= "literal" | [class] | [^class] | "." | NAME | "(" alternatives ")"
//   postfix ::= element ("*" | "+" | "?" | "{m}" | "{m,}" | "{m,n}")
// Literals and classes are UTF-8 text with the escapes \" \\ \n \r \t \[ \] \- \^
// \xHH \uHHHH \UHHHHHHHH; a class holds code points and ranges a-z, over Unicode code
// points (a negated class matches any code point outside it, multi-byte UTF-8
// included; `.` is any code point, \n too). `#` starts a comment. The start rule is
// `root`. Refused: a rule that can reach itself without consuming a byte (left recursion;
// `x*` where x can be empty is one: write `x` so that it cannot), a rule that derives no
// finite string. Surrogates (U+D800–DFFF) are never matched; a negated class matches
// only well-formed UTF-8.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace olmo2::structured {

/// A constraint that cannot be compiled: `path` names where (a JSON pointer into the
/// schema such as "/properties/age/minimum", a regex offset "regex offset 7", a grammar
/// line), and what() says why (an unsupported keyword names it; an unsatisfiable schema
/// says so). The API maps it to a 400 naming the request field.
class ConstraintError : public InputError {
 public:
  ConstraintError(const std::string& message, std::string path, const char* file, int line)
      : InputError(message, file, line), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// The model's vocabulary as the matcher sees it: each token's bytes, which ids may
/// never appear in a constrained output (special/added tokens, padding rows past the
/// tokenizer), and the EOS ids (allowed exactly where the output is complete).
/// Built once per server on rank 0; immutable; shared by every request.
class Vocabulary {
 public:
  /// `bytes[id]` for id in [0, vocab_size): the token's raw bytes ("" for ids past the
  /// tokenizer); `excluded`: ids never allowed (ascending); `eos`: the stop ids that end
  /// a complete output. Builds the token trie. Throws InputError for ids out of range.
  Vocabulary(std::vector<std::string> bytes, std::vector<int32_t> excluded, std::vector<int32_t> eos);
  ~Vocabulary();
  int64_t size() const;
  const std::vector<int32_t>& eos() const;
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// A compiled grammar: immutable and shareable between requests and threads; its mask
/// cache (per matcher state, filled lazily) is internally synchronized.
class Grammar {
 public:
  /// Parses grammar text (above). Throws ConstraintError naming the rule or line: a
  /// syntax error, an undefined rule, no `root`, a rule that derives no finite string
  /// (left recursion included).
  static std::shared_ptr<const Grammar> parse(const std::string& text);
  ~Grammar();
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  Grammar();
  std::unique_ptr<Impl> impl_;
};

/// One output's progress through a grammar: the set of parser states after the bytes of
/// the tokens accepted so far. Copyable (a choice forks its matcher). Not thread-safe
/// itself (one per output); its grammar and vocabulary are shared.
class Matcher {
 public:
  /// Starts at the grammar's start. `vocabulary` may be null for a matcher used through
  /// accept_bytes alone (then accept() is false and fill_mask throws ShapeError).
  /// Matching throws ConstraintError when a grammar is so ambiguous that one state
  /// would hold more than 4096 parse stacks.
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary);
  Matcher(const Matcher&);
  Matcher& operator=(const Matcher&);
  ~Matcher();

  /// Advances over token `id`'s bytes. An EOS id is accepted only when complete() (and
  /// then terminated() holds). Returns false and changes nothing for a token the grammar
  /// does not allow here.
  bool accept(int32_t id);
  /// Advances over raw bytes (tests, and a prefix the server forces). False and no
  /// change when the bytes leave the grammar.
  bool accept_bytes(std::string_view bytes);
  /// The bytes so far form a whole sentence of the grammar (EOS may come next).
  bool complete() const;
  /// No byte can follow: only EOS may come next.
  bool closed() const;
  /// An EOS was accepted.
  bool terminated() const;
  /// The fewest bytes that take the output from here to a complete sentence (0 when
  /// complete()). Every single byte is a token of a byte-level BPE vocabulary, so the
  /// output can always be completed within this many tokens.
  int64_t min_bytes_to_complete() const;

  /// Sets bits.size() × 64 ≥ vocabulary size bits: bit id (word id / 64, bit id % 64)
  /// is 1 when token id may come next with `remaining` ≥ 1 tokens left including it:
  /// its bytes keep the output inside the grammar and leave a state whose
  /// min_bytes_to_complete() ≤ remaining − 1 (so any max_tokens of at least the bytes
  /// left gets a complete output); EOS ids exactly when complete(). Excluded ids are 0.
  /// Masks of a state are cached in the grammar (the length rule is applied on top where
  /// it can bind). A `remaining` below min_bytes_to_complete() (tokens carry several
  /// bytes, so it may still suffice) allows only the tokens that make the most progress
  /// (those leaving the fewest bytes; a complete output where one reaches it): the mask
  /// is never empty, and the output completes whenever taking the longest token at each
  /// step fits the budget. Throws ShapeError when bits is too short.
  void fill_mask(std::span<uint64_t> bits, int64_t remaining) const;

 private:
  struct State;
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::unique_ptr<State> state_;
};

/// Options of the JSON Schema compiler.
struct JsonSchemaOptions {
  /// The whitespace allowed between JSON tokens. Default: none at all — OpenAI's strict
  /// mode output form, `{"a":1,"b":[true,null]}`. "any" allows JSON's whitespace
  /// (space, \t, \n, \r), at most `max_whitespace` characters at each place.
  enum class Whitespace { Compact, Any } whitespace = Whitespace::Compact;
  int32_t max_whitespace = 4;
  /// additionalProperties when a schema says nothing: false (OpenAI strict, and vLLM's
  /// default backends' behaviour) or true (JSON Schema's own default).
  bool additional_properties_default = false;
};

/// JSON Schema (draft 2020-12 keywords listed in docs/architecture.md §8) → grammar
/// text whose sentences are JSON texts valid against `schema_json` (a JSON document,
/// parsed here) in the whitespace form of `options` — every sentence validates; some
/// valid texts are not sentences (docs/architecture.md §8 lists these narrowings: e.g.
/// integers never as 1.0, numbers near a non-integer bound). Object properties come in
/// the schema's `properties` order, required ones always, optional ones may be left
/// out. Throws ConstraintError (path into the schema): malformed JSON, an unsupported
/// keyword (named), a keyword of the wrong type, an unsatisfiable schema (min > max, an
/// empty enum, no type left), a $ref that does not resolve, a oneOf whose branches may
/// overlap.
std::string json_schema_to_grammar(const std::string& schema_json, const JsonSchemaOptions& options = {});

/// Grammar text of any JSON object (`response_format: {"type": "json_object"}`).
std::string json_object_grammar(const JsonSchemaOptions& options = {});

/// Grammar text of the strings matching an ECMAScript regular expression, whole (as if
/// anchored ^…$; explicit anchors at the ends are accepted). The subset: literals and
/// escapes, . (any code point but the line terminators \n \r U+2028 U+2029), classes
/// with ranges and \d \w \s \D \W \S (as ECMAScript and Python agree:
/// docs/architecture.md §8), groups (capturing, (?:…), (?<name>…)), alternation,
/// * + ? {m} {m,} {m,n} (lazy forms accepted, same language). Throws ConstraintError
/// ("regex offset N") for anything else (backreferences, lookaround, a malformed
/// expression).
std::string regex_to_grammar(const std::string& pattern);

/// Grammar text of exactly the given strings. Throws ConstraintError for an empty list.
std::string choice_grammar(const std::vector<std::string>& choices);

}  // namespace olmo2::structured
