// The structured-output request fields of /v1/completions and /v1/chat/completions
// (docs/architecture.md §8, "Structured outputs"): OpenAI's response_format and vLLM's
// guided_* and structured_outputs, compiled to the grammar the engine enforces.
#pragma once

#include <string>

#include "runtime/serve/api/json_fields.h"
#include "runtime/serve/api/served_model.h"
#include "runtime/serve/serve_request.h"

namespace olmo2 {

/// Reads the constraint of a request into p.grammar (null when none), compiled through
/// the process's GrammarCache (grammar_cache.h) keyed by the constraint's kind, the JSON
/// Schema options and its canonical text. The fields (at most one constraint per request):
///  - response_format: {"type": "text"} (none), {"type": "json_object"} (any JSON
///    object), {"type": "json_schema", "json_schema": {"name" (required: 1–64 of
///    a-z A-Z 0-9 _ -, as OpenAI), "schema" (required, an object), "strict" (a bool,
///    enforced either way), "description" (a string)}} (OpenAI);
///  - guided_json (a schema: an object, or a string holding one), guided_regex (a
///    string), guided_choice (a non-empty list of strings), guided_grammar (this
///    project's grammar text, runtime/structured/constraint.h), guided_decoding_backend
///    (a string, ignored: there is one engine) (vLLM's older fields);
///  - structured_outputs: {"json" | "regex" | "choice" | "grammar" | "json_object": true,
///    and disable_any_whitespace, disable_additional_properties, disable_fallback (bools)}
///    (vLLM's newer form).
/// A schema keeps its key order (properties come out in the schema's order): it is read
/// from `body_text` again, order-preserving. JSON's whitespace between tokens is
/// served.json_options' (--structured-whitespace), compact unless structured_outputs'
/// disable_any_whitespace is false. guided_whitespace_pattern and whitespace_pattern are
/// refused (no clean mapping onto the compiler's options). Throws ApiError 400 naming
/// the field: two constraints (both named), a malformed value, and a constraint that
/// does not compile (ConstraintError: the message names the path in the schema, the
/// regex offset or the grammar line).
void read_structured_fields(Fields& f, const std::string& body_text, const ServedModel& served, CompletionParams& p);

}  // namespace olmo2
