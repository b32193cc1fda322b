// The chat request's tool fields (docs/architecture.md §8, "Tool calls"): `tools`,
// `tool_choice` and `parallel_tool_calls` of OpenAI's chat completions, checked, and what
// generation and the response make of them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/serve/api/json_fields.h"
#include "runtime/serve/api/tool_call_parser.h"
#include "runtime/structured/constraint.h"

namespace olmo2 {


/// What the request asks of tool calls. Mode: None — no tools, or tool_choice "none"
/// (the template still gets the tools, as vLLM renders them; nothing is parsed); Auto —
/// the model may call: its output is parsed with `format` after generation; Named — the
/// output is constrained to the arguments of `function` (a JSON object valid against its
/// parameters); Required — the output is constrained to a JSON array of one or more
/// {"name", "parameters"} calls of the tools (at most one with parallel_tool_calls
/// false).
struct ToolPlan {
  enum class Mode { None, Auto, Named, Required } mode = Mode::None;
  ToolCallFormat format = ToolCallFormat::None;  ///< Auto: the model's call syntax
  std::string function;                          ///< Named: the function's name
  bool parallel_tool_calls = true;               ///< false: at most one call is returned
};

/// The server's tool support: whether its chat template takes a `tools` variable, and
/// the call syntax of its model (--tool-call-parser, else detected from the template).
struct ChatToolSupport {
  bool template_takes_tools = false;
  ToolCallFormat format = ToolCallFormat::None;
};

/// The checked tool fields of one request.
struct ToolFields {
  /// The tools as sent (key order kept; null when none): the template's `tools`.
  nlohmann::ordered_json tools;
  ToolPlan plan;
  /// Named and Required: the JSON Schema (text) the output must be valid against; ""
  /// otherwise. Named: the function's parameters ({"type": "object", "properties": {}}
  /// when it has none). Required: {"type": "array", "minItems": 1, ["maxItems": 1,]
  /// "items": {"anyOf": [{"type": "object", "properties": {"name": {"type": "string",
  /// "enum": [NAME]}, "parameters": PARAMETERS}, "required": ["name", "parameters"]}, …]}}
  /// — vLLM's shape for tool_choice "required".
  std::string schema;
};

/// Reads `tools`, `tool_choice`, `parallel_tool_calls` (marking them read in `f`).
/// `ordered_tools` is the request's `tools` value parsed with its key order (or null).
/// tools: a list of {"type": "function", "function": {"name", "description"?,
/// "parameters"?, "strict"?}}: names of 1–64 characters from a-z A-Z 0-9 _ -, unique;
/// description a string; parameters a JSON Schema object whose type, when given, is
/// "object"; strict a bool. An empty list is no tools. tool_choice: "none", "auto",
/// "required" or {"type": "function", "function": {"name": one of the tools}}; default
/// "auto" with tools, "none" without; anything but "none" needs tools. Tools with a
/// server whose template does not take them are refused (param tools). Throws ApiError
/// 400 naming the field (tools[1].function.name, tool_choice.function.name, …).
ToolFields read_tool_fields(Fields& f, const nlohmann::ordered_json& ordered_tools, const ChatToolSupport& support);

/// The grammar of ToolFields::schema (JSON Schema → grammar text → Grammar, the
/// constraint engine of runtime/structured/, with the server's JSON options:
/// --structured-whitespace), from the process's grammar cache. Throws ApiError 400 naming tools when a tool's parameters cannot be compiled
/// (an unsupported keyword, an unsatisfiable schema: the engine's message and path).
std::shared_ptr<const structured::Grammar> compile_tool_schema(const std::string& schema,
                                                               const structured::JsonSchemaOptions& options);

}  // namespace olmo2
