// The /v1/chat/completions response (docs/architecture.md §8, API): "chat.completion"
// bodies and "chat.completion.chunk" stream events.
#pragma once

#include <map>

#include "runtime/serve/api/response_assembler.h"
#include "runtime/serve/api/tool_call_response.h"

namespace olmo2 {

/// ResponseAssembler with OpenAI's chat shape. Body choices: {index, message: {role:
/// "assistant", content}, logprobs, finish_reason}; content starts with
/// request.echo_prefix (vLLM's echo). Stream events: object "chat.completion.chunk",
/// choices [{index, delta, logprobs, finish_reason}]; a choice's first delta carries
/// role "assistant" and content (the echo prefix first), later ones content only, and a
/// last chunk without text has an empty delta (OpenAI's final chunk). logprobs (with
/// "logprobs": true): {content: [chat_logprob_entry of each generated token]} — the echo
/// prefix has no entries — else null.
///
/// Tool calls (request.tool_plan, docs/architecture.md §8, "Tool calls"): the message
/// is tool_call_message's — content (a string or null), tool_calls when there are any,
/// and its finish_reason. Streamed, each choice's text goes through a ToolCallStream:
/// what cannot be a call is sent as it comes, the rest in the choice's last delta as
/// content and tool_calls (each with its index).
class ChatAssembler : public ResponseAssembler {
 public:
  using ResponseAssembler::ResponseAssembler;

 protected:
  nlohmann::json body_choice(const Prompt& prompt, const Choice& choice, int64_t index) const override;
  nlohmann::json stream_choice(const Prompt& prompt, Choice& choice, int64_t index,
                               const CompletionChunk& chunk) const override;
  bool first_event_says_something() const override { return true; }
  const char* body_object() const override { return "chat.completion"; }
  const char* chunk_object() const override { return "chat.completion.chunk"; }

 private:
  nlohmann::json logprobs(const std::vector<SelectedToken>& tokens) const;
  /// The stream state of each choice (by index) when the request has tool calls.
  mutable std::map<int64_t, ToolCallStream> tool_streams_;
};

}  // namespace olmo2
