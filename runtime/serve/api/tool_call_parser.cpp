// Tool-call parsers (tool_call_parser.h; docs/architecture.md §8, "Tool calls"). The
// formats are those the families' chat templates write for a call in the history (the
// Olmo 3 Instruct and Qwen2.5 templates in tests/serve/fixtures/), which is what the
// models were trained to emit.
#include "runtime/serve/api/tool_call_parser.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace olmo2 {

namespace {

using ordered = nlohmann::ordered_json;

constexpr std::string_view kOlmo3Open = "<function_calls>", kOlmo3Close = "</function_calls>";
constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";

bool blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// The blocks `open … close` of `text` (the last may run to the end unclosed): their
// bodies, and the text outside them.
struct Blocks {
  std::vector<std::string_view> bodies;
  std::string outside;
};

Blocks split_blocks(std::string_view text, std::string_view open, std::string_view close) {
  Blocks b;
  size_t at = 0;
  while (true) {
    const size_t start = text.find(open, at);
    if (start == std::string_view::npos) {
      b.outside += text.substr(at);
      return b;
    }
    b.outside += text.substr(at, start - at);
    const size_t body = start + open.size();
    const size_t end = text.find(close, body);
    if (end == std::string_view::npos) {
      b.bodies.push_back(text.substr(body));
      return b;
    }
    b.bodies.push_back(text.substr(body, end - body));
    at = end + close.size();
  }
}

std::vector<ParsedToolCall> hermes_calls(std::string_view body) {
  const ordered call = ordered::parse(body.begin(), body.end());  // throws for malformed JSON
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) {
    OLMO2_THROW(InputError, "hermes tool call: not an object with a string name");
  }
  ordered args = call.contains("arguments") ? call["arguments"] : ordered::object();
  if (args.is_string()) args = ordered::parse(args.get<std::string>());  // arguments given as JSON text
  if (!args.is_object()) OLMO2_THROW(InputError, "hermes tool call: arguments are not an object");
  return {ParsedToolCall{call["name"].get<std::string>(), args.dump()}};
}

}  // namespace

ToolCallFormat tool_call_format_from_name(std::string_view name) {
  if (name == "none") return ToolCallFormat::None;
  if (name == "olmo3") return ToolCallFormat::Olmo3;
  if (name == "hermes") return ToolCallFormat::Hermes;
  OLMO2_THROW(InputError, "unknown tool-call parser '", std::string(name), "' (olmo3, hermes or none)");
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Olmo3: return "olmo3";
    case ToolCallFormat::Hermes: return "hermes";
    case ToolCallFormat::None: break;
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(const std::string& template_source) {
  if (template_source.find(kOlmo3Open) != std::string::npos) return ToolCallFormat::Olmo3;
  if (template_source.find(kHermesOpen) != std::string::npos) return ToolCallFormat::Hermes;
  return ToolCallFormat::None;
}

std::string_view tool_call_start(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Olmo3: return kOlmo3Open;
    case ToolCallFormat::Hermes: return kHermesOpen;
    case ToolCallFormat::None: break;
  }
  return {};
}

ParsedToolOutput parse_tool_calls(ToolCallFormat format, const std::string& text) {
  ParsedToolOutput whole{text, {}};
  if (format == ToolCallFormat::None) return whole;
  const bool olmo3 = format == ToolCallFormat::Olmo3;
  const Blocks blocks = olmo3 ? split_blocks(text, kOlmo3Open, kOlmo3Close) : split_blocks(text, kHermesOpen, kHermesClose);
  if (blocks.bodies.empty()) return whole;
  ParsedToolOutput out;
  try {
    for (std::string_view body : blocks.bodies) {
      std::vector<ParsedToolCall> calls = olmo3 ? parse_pythonic_calls(body) : hermes_calls(body);
      for (ParsedToolCall& c : calls) out.calls.push_back(std::move(c));
    }
  } catch (const std::exception&) {  // malformed calls (or arguments that are not UTF-8): plain content
    return whole;
  }
  out.content = blank(blocks.outside) ? std::string() : blocks.outside;
  return out;
}

}  // namespace olmo2
