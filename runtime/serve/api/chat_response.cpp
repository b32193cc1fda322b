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
  if (request_.tool_plan.mode != ToolPlan::Mode::None) {
    const ToolCallMessage m = tool_call_message(request_.tool_plan, choice.text, choice.finish_reason);
    json message = {{"role", "assistant"}, {"content", m.content}};
    if (m.content.is_string() && !request_.echo_prefix.empty()) message["content"] = request_.echo_prefix + m.content.get<std::string>();
    if (!m.tool_calls.is_null()) message["tool_calls"] = m.tool_calls;
    return {{"index", index},
            {"message", message},
            {"logprobs", logprobs(choice.tokens)},
            {"finish_reason", finish_json(m.finish_reason)}};
  }
  const json message = {{"role", "assistant"}, {"content", request_.echo_prefix + choice.text}};
  return {{"index", index},
          {"message", message},
          {"logprobs", logprobs(choice.tokens)},
          {"finish_reason", finish_json(choice.finish_reason)}};
}

json ChatAssembler::stream_choice(const Prompt&, Choice& choice, int64_t index, const CompletionChunk& chunk) const {
  std::string text = chunk.text, finish_reason = chunk.finish_reason;
  json tool_calls = nullptr;
  if (request_.tool_plan.mode != ToolPlan::Mode::None) {
    ToolCallStream& stream = tool_streams_.try_emplace(index, request_.tool_plan).first->second;
    text = stream.feed(chunk.text);
    if (!chunk.finish_reason.empty()) {
      const ToolCallMessage m = stream.finish(chunk.finish_reason);
      if (m.content.is_string()) text += m.content.get<std::string>();
      tool_calls = m.tool_calls;
      finish_reason = m.finish_reason;
    }
  }
  json delta = json::object();
  if (!choice.started) {
    delta["role"] = "assistant";
    delta["content"] = request_.echo_prefix + text;
  } else if (!text.empty() || chunk.finish_reason.empty()) {
    delta["content"] = text;
  }
  if (!tool_calls.is_null()) delta["tool_calls"] = tool_calls;
  return {{"index", index},
          {"delta", delta},
          {"logprobs", logprobs(chunk.tokens)},
          {"finish_reason", finish_json(finish_reason)}};
}

}  // namespace olmo2
