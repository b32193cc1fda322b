// The /v1/chat/completions response (docs/architecture.md §8, API): "chat.completion"
// bodies and "chat.completion.chunk" stream events.
#pragma once

#include "runtime/serve/api/response_assembler.h"

namespace olmo2 {

/// ResponseAssembler with OpenAI's chat shape. Body choices: {index, message: {role:
/// "assistant", content}, logprobs, finish_reason}; content starts with
/// request.echo_prefix (vLLM's echo). Stream events: object "chat.completion.chunk",
/// choices [{index, delta, logprobs, finish_reason}]; a choice's first delta carries
/// role "assistant" and content (the echo prefix first), later ones content only, and a
/// last chunk without text has an empty delta (OpenAI's final chunk). logprobs (with
/// "logprobs": true): {content: [chat_logprob_entry of each generated token]} — the echo
/// prefix has no entries — else null.
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
};

}  // namespace olmo2
