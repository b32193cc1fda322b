// The evaluator of the chat-template interpreter (docs/architecture.md §8, chat
// templates): renders a parsed template with Jinja2's scoping rules.
#pragma once

#include <string>

#include "runtime/serve/chat/template_ast.h"

namespace olmo2::chat {

/// Renders `body` (parsed from `source`, which positions in errors refer to) with the
/// context `variables`. Scoping as Jinja2: each iteration of a for loop is a scope of its
/// own (a `set` inside it is gone after the iteration; namespaces carry values out), `if`
/// opens none, a macro call runs in a scope above the template's top level. Name lookup:
/// scopes inside out, then `variables`, then the global functions. Throws TemplateRaised
/// (an InputError whose message is the template's) for raise_exception, and InputError
/// naming the problem and its line and column for any other failure: reading an
/// attribute of an undefined value, arithmetic on it, calling it, a type error, a
/// non-JSON value in tojson, an output over 64 MiB or macros nested over 100 deep.
std::string render_body(const Body& body, const std::string& source, const Dict& variables);

}  // namespace olmo2::chat
