// The /v1/completions response (docs/architecture.md §8, API): "text_completion" bodies
// and stream events.
#pragma once

#include "runtime/serve/api/logprobs_json.h"
#include "runtime/serve/api/response_assembler.h"

namespace olmo2 {

/// ResponseAssembler with OpenAI's legacy completions shape: each choice {index, text,
/// logprobs, finish_reason}, object "text_completion" (also for stream events).
/// With echo the choice's text starts with the prompt's text (request.prompt_texts), and
/// with logprobs its entries start with the prompt's tokens (the first one's logprob and
/// top_logprobs null); streamed, both come with the choice's first event.
/// logprobs: {tokens, token_logprobs, top_logprobs, text_offset} (logprobs_json.h);
/// text_offset counts characters of the text actually returned (token_text.h
/// TextOffsets, skipping special tokens as the text does), never past it: a token whose
/// text a stop string cut off points at the end of the text. Streamed, offsets continue
/// across events and are capped by the text sent so far (a token whose text is held
/// back, as a possible stop string, points at the end of what was sent).
class CompletionAssembler : public ResponseAssembler {
 public:
  using ResponseAssembler::ResponseAssembler;

 protected:
  nlohmann::json body_choice(const Prompt& prompt, const Choice& choice, int64_t index) const override;
  nlohmann::json stream_choice(const Prompt& prompt, Choice& choice, int64_t index,
                               const CompletionChunk& chunk) const override;
  bool first_event_says_something() const override { return request_.echo; }
  const char* body_object() const override { return "text_completion"; }
  const char* chunk_object() const override { return "text_completion"; }

 private:
  /// Adds the echoed prompt's entries to `lp`; returns the prompt text's characters.
  int64_t add_prompt_entries(const Prompt& prompt, CompletionLogprobs* lp) const;
};

}  // namespace olmo2
