// Tool calls in the chat response (docs/architecture.md §8, "Tool calls"): a choice's
// generated text → the message's content and tool_calls, whole or streamed.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/serve/api/tool_fields.h"

namespace olmo2 {

/// What a finished choice says under `plan`.
struct ToolCallMessage {
  nlohmann::json content;     ///< a string, or null (no text besides the calls)
  nlohmann::json tool_calls;  ///< [{id, type: "function", function: {name, arguments}}], or null: none
  std::string finish_reason;  ///< the engine's, or "tool_calls"
};

/// The message of a choice that generated `text` and ended with `finish_reason`:
///  - Mode::None: the text, as it is.
///  - Auto: parse_tool_calls with plan.format; calls found → content the text outside
///    them (null when blank), finish_reason "tool_calls" (vLLM's rule); only the first
///    call with parallel_tool_calls false.
///  - Named: the text is the arguments object → one call of plan.function, content
///    null, finish_reason as generated ("stop": OpenAI's and vLLM's answer to a named
///    tool_choice).
///  - Required: the text is [{"name", "parameters"}, …] → one call each, content null,
///    finish_reason "tool_calls" (vLLM).
/// A Named or Required text that is not the JSON expected (cut short by max_tokens) is
/// returned as content with no calls. Ids are "call_" + 32 random hex digits (make_response_id).
ToolCallMessage tool_call_message(const ToolPlan& plan, const std::string& text, const std::string& finish_reason);

/// The streamed form, one per choice: while the text cannot be a call it passes
/// through at once; from where a call may start (plan.format's opening tag, or all of
/// it for Named and Required) it is held, and the end of the choice gives the rest as
/// content and/or tool_calls (finish()). So plain text streams as without tools, and
/// tool calls come whole in the choice's last delta.
class ToolCallStream {
 public:
  explicit ToolCallStream(const ToolPlan& plan) : plan_(plan) {}
  /// The part of `text` (the next piece of the choice) that can be sent now.
  std::string feed(const std::string& text);
  /// At the choice's end: the held text's message — content (string or null) to send,
  /// tool_calls in a delta's form (each with "index") or null, and the finish_reason.
  ToolCallMessage finish(const std::string& finish_reason);

 private:
  ToolPlan plan_;
  std::string held_;
  bool in_call_ = false;
};

}  // namespace olmo2
