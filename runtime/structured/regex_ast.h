// The regex compiler's syntax tree (docs/architecture.md §8, "Structured outputs"):
// regex_parse.cpp builds it from an ECMAScript pattern, regex.cpp writes it as grammar
// text. Internal.
#pragma once

#include <string>
#include <vector>

#include "runtime/structured/grammar_writer.h"

namespace olmo2::structured::detail {

/// One node: a set of code points, a sequence, alternatives, or a repetition.
struct Node {
  enum class Kind { Chars, Concat, Alt, Repeat } kind = Kind::Concat;
  CodeRanges set;
  std::vector<Node> kids;
  int min = 1, max = 1;  // Repeat; max −1 = unbounded
};

/// A top-level alternative and whether ^ starts it and $ ends it.
struct RegexAlternative {
  Node node;
  bool start = false, end = false;
};

/// Parses the ECMAScript subset of constraint.h regex_to_grammar into its top-level
/// alternatives. Throws ConstraintError ("regex offset N", N in code points; `pointer`
/// prefixes the path when not empty).
std::vector<RegexAlternative> parse_regex(const std::string& pattern, const std::string& pointer);

}  // namespace olmo2::structured::detail
