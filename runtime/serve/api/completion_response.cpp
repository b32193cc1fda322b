#include "runtime/serve/api/completion_response.h"

#include <algorithm>

#include "runtime/serve/api/logprobs_json.h"

namespace olmo2 {

using nlohmann::json;

namespace {
json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }
}  // namespace

int64_t CompletionAssembler::add_prompt_entries(const Prompt& prompt, CompletionLogprobs* lp) const {
  const int64_t chars = utf8_length(request_.prompt_texts[prompt.index]);
  if (lp) {
    TextOffsets offsets(tokenizer_, false);
    for (size_t k = 0; k < prompt.entries.size(); ++k) {
      lp->add(prompt.entries[k], std::min(offsets.push(prompt.entries[k].id), chars), k > 0);
    }
  }
  return chars;
}

json CompletionAssembler::body_choice(const Prompt& prompt, const Choice& choice, int64_t index) const {
  std::string text = request_.echo ? request_.prompt_texts[prompt.index] : std::string();
  json logprobs = nullptr;
  if (request_.want_logprobs) {
    CompletionLogprobs lp(tokenizer_, request_.top_logprobs, request_.return_tokens_as_token_ids);
    const int64_t start = request_.echo ? add_prompt_entries(prompt, &lp) : 0;
    const int64_t end = start + utf8_length(choice.text);
    TextOffsets offsets(tokenizer_, request_.skip_special_tokens, start);
    for (const SelectedToken& t : choice.tokens) lp.add(t, std::min(offsets.push(t.id), end));
    logprobs = lp.value();
  }
  text += choice.text;
  return {{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_json(choice.finish_reason)}};
}

json CompletionAssembler::stream_choice(const Prompt& prompt, Choice& choice, int64_t index,
                                        const CompletionChunk& chunk) const {
  std::string text;
  std::optional<CompletionLogprobs> lp;
  if (request_.want_logprobs) lp.emplace(tokenizer_, request_.top_logprobs, request_.return_tokens_as_token_ids);
  if (!choice.started) {
    if (request_.echo) {
      text = request_.prompt_texts[prompt.index];
      choice.sent_chars = add_prompt_entries(prompt, lp ? &*lp : nullptr);
    }
    choice.offsets.emplace(tokenizer_, request_.skip_special_tokens, choice.sent_chars);
  }
  text += chunk.text;
  choice.sent_chars += utf8_length(chunk.text);
  if (lp) {
    for (const SelectedToken& t : chunk.tokens) lp->add(t, std::min(choice.offsets->push(t.id), choice.sent_chars));
  }
  return {{"index", index},
          {"text", text},
          {"logprobs", lp ? lp->value() : json(nullptr)},
          {"finish_reason", finish_json(chunk.finish_reason)}};
}

}  // namespace olmo2
