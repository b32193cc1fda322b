// Python's str methods on UTF-8 text, as chat templates call them (docs/architecture.md §8,
// chat templates). Python counts and indexes code points, and its whitespace is Unicode
// whitespace (str.isspace), so these decode UTF-8 where that matters. Case mapping
// (upper, lower, title, capitalize) maps ASCII letters only; other characters pass through.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace olmo2::chat {

/// The code points of UTF-8 `s` (a byte that does not start a valid sequence counts as
/// one code point of its own value, so nothing is lost).
std::u32string decode_utf8(std::string_view s);
/// UTF-8 of code points.
std::string encode_utf8(std::u32string_view s);
/// Python's str.isspace for one code point (\t \n \v \f \r, \x1c-\x1f, space, \x85, \xa0,
/// U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
bool is_py_space(char32_t c);
/// Number of code points (Python's len of a str).
size_t py_len(std::string_view s);

/// str.strip / lstrip / rstrip: `chars` absent strips whitespace, else any of its code points.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
/// str.split(sep, maxsplit): without `sep` splits on runs of whitespace and drops empty
/// pieces; with it splits on every occurrence (an empty sep throws InputError).
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  long maxsplit);
/// str.replace(old, new, count): count < 0 replaces all; an empty `old` inserts `new`
/// before every code point and at the end, as Python does.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, long count);
/// str.upper / str.lower on ASCII letters (other characters unchanged).
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
/// str.title: a letter after a letter is lowered, any other letter raised.
std::string py_title(std::string_view s);
/// str.capitalize: first character upper, the rest lower.
std::string py_capitalize(std::string_view s);
/// Jinja2's title filter: words start after runs of '-', whitespace, '(', '{', '[', '<';
/// each word's first character is raised and the rest lowered.
std::string jinja_title(std::string_view s);

/// Python's repr of a str: single quotes unless the text has ' and no ", backslash escapes
/// for the quote, \\, \n, \r, \t and other control characters (\xNN, \uNNNN).
std::string py_str_repr(std::string_view s);

/// Python slice indices for a sequence of `length`: fills the positions s[start:stop:step]
/// selects. Absent bounds take Python's defaults; throws InputError for step 0.
std::vector<size_t> slice_positions(size_t length, std::optional<long> start, std::optional<long> stop,
                                    std::optional<long> step);

}  // namespace olmo2::chat
