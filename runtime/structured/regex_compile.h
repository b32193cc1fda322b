// The regex compiler's entry shared by guided_regex and JSON Schema's `pattern`
// (docs/architecture.md §8, "Structured outputs"). Internal.
#pragma once

#include <string>

#include "runtime/structured/grammar_writer.h"

namespace olmo2::structured::detail {

/// How a regex is turned into a grammar expression.
struct RegexMode {
  /// false: the whole text must match (guided_regex). true: JSON Schema `pattern`
  /// semantics (a match anywhere, as re.search): an alternative not anchored by ^ or $
  /// gets `any_char`* before or after it.
  bool search = false;
  /// true: each matched code point is written in its JSON string encoding (" as \",
  /// \ as \\, control characters as \n … or \u00XX), for a string's content.
  bool json_content = false;
  /// The grammar expression of one arbitrary character, for search padding.
  std::string any_char;
};

/// A grammar expression (no rules of its own) of the strings matching the
/// ECMAScript regex `pattern` (the subset of regex_to_grammar in constraint.h).
/// `pointer` prefixes error paths (a schema pointer, or "" for guided_regex). Returns
/// "\"\"" when only the empty string matches. Throws ConstraintError ("regex offset N",
/// N in code points) for what the subset lacks or a malformed pattern.
std::string regex_expression(const std::string& pattern, const RegexMode& mode, const std::string& pointer);

/// As regex_expression (mode.search ignored: the pattern must be anchored ^…$, one
/// alternative) for content whose length in code points lies in [min_length,
/// max_length] (−1: no maximum). Exact when the pattern's lengths already fit, or when
/// its length varies in one repeated character class only (^[^a-z]*$, ^x-\d{2,}$),
/// whose count takes the bounds. Throws ConstraintError at `pointer` otherwise, or
/// "unsatisfiable" when nothing fits.
std::string regex_expression_bounded(const std::string& pattern, const RegexMode& mode, const std::string& pointer,
                                     long long min_length, long long max_length);

}  // namespace olmo2::structured::detail
