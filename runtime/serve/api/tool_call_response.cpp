// tool_call_message and ToolCallStream (tool_call_response.h). The response shapes are
// OpenAI's chat completion message and chunk delta with tool_calls; the finish_reason
// rules vLLM's (docs/architecture.md §8, "Tool calls").
#include "runtime/serve/api/tool_call_response.h"

#include <algorithm>

#include "runtime/serve/api/response_id.h"

namespace olmo2 {

using nlohmann::json;
using ordered = nlohmann::ordered_json;

namespace {

json call_json(const std::string& name, const std::string& arguments) {
  return {{"id", make_response_id("call_")}, {"type", "function"},
          {"function", {{"name", name}, {"arguments", arguments}}}};
}

// Parses `text` as JSON; nullopt-like null for text that is not JSON.
ordered parse_or_null(const std::string& text) {
  try {
    return ordered::parse(text);
  } catch (const std::exception&) {
    return ordered();
  }
}

}  // namespace

ToolCallMessage tool_call_message(const ToolPlan& plan, const std::string& text, const std::string& finish_reason) {
  ToolCallMessage plain{json(text), json(nullptr), finish_reason};
  switch (plan.mode) {
    case ToolPlan::Mode::None:
      return plain;
    case ToolPlan::Mode::Auto: {
      ParsedToolOutput parsed = parse_tool_calls(plan.format, text);
      if (parsed.calls.empty()) return plain;
      if (!plan.parallel_tool_calls) parsed.calls.resize(1);
      json calls = json::array();
      for (const ParsedToolCall& c : parsed.calls) calls.push_back(call_json(c.name, c.arguments));
      return {parsed.content.empty() ? json(nullptr) : json(parsed.content), calls, "tool_calls"};
    }
    case ToolPlan::Mode::Named: {
      const ordered args = parse_or_null(text);
      if (!args.is_object()) return plain;
      return {json(nullptr), json::array({call_json(plan.function, args.dump())}), finish_reason};
    }
    case ToolPlan::Mode::Required: {
      const ordered list = parse_or_null(text);
      if (!list.is_array() || list.empty()) return plain;
      json calls = json::array();
      for (const ordered& c : list) {
        if (!c.is_object() || !c.contains("name") || !c["name"].is_string() || !c.contains("parameters")) return plain;
        calls.push_back(call_json(c["name"].get<std::string>(), c["parameters"].dump()));
      }
      return {json(nullptr), calls, "tool_calls"};
    }
  }
  return plain;
}

std::string ToolCallStream::feed(const std::string& text) {
  if (plan_.mode == ToolPlan::Mode::None) return text;
  held_ += text;
  if (in_call_ || plan_.mode != ToolPlan::Mode::Auto) return {};
  const std::string_view start = tool_call_start(plan_.format);
  if (start.empty()) {
    std::string out = std::move(held_);
    held_.clear();
    return out;
  }
  const size_t at = held_.find(start);
  size_t send = held_.size();
  if (at != std::string::npos) {
    send = at;
    in_call_ = true;
  } else {  // hold back a tail that may be the start of the opening tag
    for (size_t k = std::min(held_.size(), start.size() - 1); k > 0; --k) {
      if (held_.compare(held_.size() - k, k, start.substr(0, k)) == 0) {
        send = held_.size() - k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, send);
  held_.erase(0, send);
  return out;
}

ToolCallMessage ToolCallStream::finish(const std::string& finish_reason) {
  ToolCallMessage m = tool_call_message(plan_, held_, finish_reason);
  held_.clear();
  if (m.tool_calls.is_array()) {
    for (size_t i = 0; i < m.tool_calls.size(); ++i) m.tool_calls[i]["index"] = i;
  }
  return m;
}

}  // namespace olmo2
