#include "runtime/serve/api/chat_response.h"

#include "runtime/serve/api/logprobs_json.h"

namespace olmo2 {

using nlohmann::json;

namespace {
json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }
}  // namespace

json ChatAssembler::logprobs(const std::vector<SelectedToken>& tokens) const {
  if (!request_.want_logprobs) return nullptr;
  json content = json::array();
  for (const SelectedToken& t : tokens) {
    content.push_back(chat_logprob_entry(t, request_.top_logprobs, tokenizer_, request_.return_tokens_as_token_ids));
  }
  return {{"content", content}};
}

json ChatAssembler::body_choice(const Prompt&, const Choice& choice, int64_t index) const {
  const json message = {{"role", "assistant"}, {"content", request_.echo_prefix + choice.text}};
  return {{"index", index},
          {"message", message},
          {"logprobs", logprobs(choice.tokens)},
          {"finish_reason", finish_json(choice.finish_reason)}};
}

json ChatAssembler::stream_choice(const Prompt&, Choice& choice, int64_t index, const CompletionChunk& chunk) const {
  json delta = json::object();
  if (!choice.started) {
    delta["role"] = "assistant";
    delta["content"] = request_.echo_prefix + chunk.text;
  } else if (!chunk.text.empty() || chunk.finish_reason.empty()) {
    delta["content"] = chunk.text;
  }
  return {{"index", index},
          {"delta", delta},
          {"logprobs", logprobs(chunk.tokens)},
          {"finish_reason", finish_json(chunk.finish_reason)}};
}

}  // namespace olmo2
