// The lexer of the chat-template interpreter (docs/architecture.md §8, chat templates):
// template source → text and tag tokens, with Jinja2's whitespace control under the
// settings transformers renders chat templates with (trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace olmo2::chat {

enum class TokenType {
  Text,        ///< literal template text (already whitespace-controlled)
  VarBegin,    ///< {{
  VarEnd,      ///< }}
  BlockBegin,  ///< {%
  BlockEnd,    ///< %}
  Name,        ///< identifier (keywords too: the parser tells them apart)
  String,      ///< string literal, escapes decoded
  Int,
  Float,
  Op,          ///< operator or punctuation: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  End,         ///< end of the template
};

struct Token {
  TokenType type;
  std::string text;  ///< Text/Name/String/Op content
  int64_t int_value = 0;
  double float_value = 0.0;
  size_t pos = 0;    ///< byte offset in the normalized source, for error positions
};

/// The source as Jinja2 reads it: "\r\n" and "\r" become "\n", and one trailing newline
/// is dropped (keep_trailing_newline=False).
std::string normalize_template_source(const std::string& source);

/// "line L, column C" of byte offset `pos` in `source` (1-based; columns count bytes).
std::string describe_position(const std::string& source, size_t pos);

/// Tokens of a normalized source. Whitespace control, as Jinja2's lexer does it:
/// `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all
/// whitespace after it; trim_blocks removes the one newline right after `%}` or `#}`;
/// lstrip_blocks removes spaces and tabs between a line's start and `{%` or `{#` (not
/// `{{`), unless `{%+`. Comments are dropped; `{% raw %}…{% endraw %}` becomes text.
/// Throws InputError naming the position for an unterminated tag, comment or string, or
/// a character no token starts with.
std::vector<Token> lex_template(const std::string& source);

}  // namespace olmo2::chat
