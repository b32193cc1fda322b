// The parser of the chat-template interpreter (docs/architecture.md §8, chat templates):
// tokens → syntax tree, with Jinja2's grammar and operator precedence.
#pragma once

#include <string>

#include "runtime/serve/chat/template_ast.h"

namespace olmo2::chat {

/// Parses a normalized template source (normalize_template_source). Statements: if/elif/
/// else, for (targets, `if` filter, else), set (name, tuple, namespace attribute, block),
/// macro, break, continue, generation (rendered as its body). Expressions follow Jinja2's
/// precedence: `a if c else b` < or < and < not < comparisons and `in` < + - < ~ < * / // %
/// < ** < unary - + < filters and tests < calls, attributes and subscripts.
/// Throws InputError naming the construct and its line and column for a tag it does not
/// support (include, import, extends, block, call, filter, with, …), an unknown filter or
/// test (checked here, as Jinja2 does when it compiles), and any syntax error.
Body parse_template(const std::string& normalized_source);

}  // namespace olmo2::chat
