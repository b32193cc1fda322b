// Tool calls in a chat model's own output (docs/architecture.md §8, "Tool calls"): the
// call syntax of each model family, recognised in the generated text after generation
// (tool_choice "auto"), and the family a chat template implies.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace olmo2 {

/// The call syntax of a model family (`olmo2 serve --tool-call-parser`).
///  - Olmo3: Olmo 3 Instruct's pythonic calls, one per line, inside
///    `<function_calls>…</function_calls>`: `get_weather(city="Paris", days=2)`; keyword
///    arguments only, values Python literals (or JSON's, as the template renders them).
///  - Hermes: Qwen2.5's / Hermes' `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`
///    blocks, one per call (the last may be left open at the end of the output).
///  - None: no parsing; the output is plain content.
enum class ToolCallFormat { None, Olmo3, Hermes };

/// "none", "olmo3", "hermes" → the format. Throws InputError naming the value otherwise.
ToolCallFormat tool_call_format_from_name(std::string_view name);
/// The name above.
const char* tool_call_format_name(ToolCallFormat format);

/// The format a chat template's calls are in, from what it emits: a template that
/// writes `<function_calls>` is Olmo 3's, one that writes `<tool_call>` Hermes'; None
/// otherwise (a template without tools, or a family with no parser here).
ToolCallFormat detect_tool_call_format(const std::string& template_source);

/// The text that opens a call in `format` ("" for None): streamed text is held back
/// from the moment it may have started.
std::string_view tool_call_start(ToolCallFormat format);

/// One parsed call: the function's name and its arguments as a JSON object's text
/// (the OpenAI API's `function.arguments`, compact, keys in the order generated).
struct ParsedToolCall {
  std::string name;
  std::string arguments;
};

/// What the output says: `content` is the text outside the calls, `calls` the calls in
/// order. An output with no call, or whose calls do not parse (malformed syntax, a
/// positional argument, arguments that are not an object), is returned whole as
/// content with no calls — vLLM's parsers do the same.
struct ParsedToolOutput {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

/// Parses `text` in `format` (None: all of it is content). Never throws for any text.
ParsedToolOutput parse_tool_calls(ToolCallFormat format, const std::string& text);

/// Olmo 3's block body: calls `name(key=value, …)` separated by newlines (or commas),
/// values Python literals — strings ('…', "…", with \n \t \\ \' \" \uXXXX escapes),
/// ints, floats, True/False/None (and true/false/null), lists, tuples, dicts with string
/// keys — turned into JSON. Throws InputError naming the offset for anything else.
std::vector<ParsedToolCall> parse_pythonic_calls(std::string_view body);

}  // namespace olmo2
