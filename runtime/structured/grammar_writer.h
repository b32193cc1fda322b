// Helpers that write grammar text in the notation of constraint.h (docs/architecture.md
// §8, "Structured outputs"): quoted literals, character classes over code points, and
// a rule table that names and shares rules. Internal to the schema and regex compilers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace olmo2::structured::detail {

/// A set of Unicode code points as sorted, disjoint, non-adjacent closed ranges.
using CodeRanges = std::vector<std::pair<char32_t, char32_t>>;

/// Sorts and merges `ranges` into the canonical form above.
CodeRanges normalize(CodeRanges ranges);
/// The code points in [0, 0x10FFFF] outside `ranges` (canonical input and output).
CodeRanges complement(const CodeRanges& ranges);
/// The code points in both (canonical input and output).
CodeRanges intersect(const CodeRanges& a, const CodeRanges& b);
/// `ranges` without the UTF-16 surrogates D800–DFFF, which UTF-8 text cannot hold.
CodeRanges without_surrogates(const CodeRanges& ranges);

/// `text` (UTF-8) as a grammar literal, quotes included: `"`, `\` and control bytes escaped.
std::string literal(const std::string& text);
/// One code point as a grammar literal.
std::string literal(char32_t c);
/// `ranges` (non-empty, canonical) as a grammar class `[...]`; a negated class when that
/// is shorter.
std::string char_class(const CodeRanges& ranges);
/// UTF-8 bytes of code point `c`.
std::string utf8(char32_t c);

/// The rules of one grammar under construction: unique names, identical bodies shared,
/// rules reserved before their body is known (recursion). Names use [a-z0-9-] only.
class RuleTable {
 public:
  /// A rule with this body: an existing one when some rule already has it, else a new
  /// one named from `hint`.
  std::string add(const std::string& hint, const std::string& body);
  /// A fresh name from `hint` whose body define() gives later.
  std::string reserve(const std::string& hint);
  void define(const std::string& name, const std::string& body);
  /// Sets `root ::= body` and returns the grammar text (rules in definition order).
  std::string text(const std::string& root_body) const;

 private:
  std::string fresh(const std::string& hint);
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> by_body_;
  std::map<std::string, int> used_;
};

}  // namespace olmo2::structured::detail
