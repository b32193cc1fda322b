#include "runtime/serve/api/tokenize_api.h"

#include "runtime/serve/api/api_error.h"
#include "runtime/serve/api/json_fields.h"
#include "runtime/serve/api/sampling_fields.h"
#include "runtime/serve/api/token_text.h"

namespace olmo2 {

using nlohmann::json;

json tokenize_response(const std::string& text, const ServedModel& served, const Tokenizer& tokenizer,
                       const ChatRenderer& render) {
  const json body = parse_body(text);
  Fields f(body);
  check_model_field(f, served);
  f.boolean("add_special_tokens", false);
  const bool token_strs = f.boolean("return_token_strs", false);
  const json* prompt = f.get("prompt");
  const json* messages = f.get("messages");
  const bool add_generation_prompt = f.boolean("add_generation_prompt", true);
  f.refuse_unread();
  if ((prompt != nullptr) == (messages != nullptr)) {
    f.fail(prompt ? "messages" : "prompt", "give exactly one of prompt (a string) and messages (a chat)");
  }
  std::string source;
  if (prompt) {
    if (!prompt->is_string()) f.fail("prompt", "prompt must be a string, got " + brief(*prompt));
    source = prompt->get<std::string>();
  } else {
    const nlohmann::ordered_json checked = check_messages(messages);
    if (!render) f.fail("messages", "this server has no chat template (olmo2 serve --chat-template FILE)");
    try {
      source = render(checked, add_generation_prompt, nullptr);
    } catch (const std::exception& e) {
      f.fail("messages", std::string("the chat template cannot render these messages: ") + e.what());
    }
  }
  const std::vector<int32_t> ids = tokenizer.encode(source);
  json strs = nullptr;
  if (token_strs) {
    strs = json::array();
    for (const int32_t id : ids) strs.push_back(token_display(tokenizer, id, false));
  }
  return {{"count", ids.size()}, {"max_model_len", served.context_length}, {"tokens", ids}, {"token_strs", strs}};
}

json detokenize_response(const std::string& text, const ServedModel& served, const Tokenizer& tokenizer) {
  const json body = parse_body(text);
  Fields f(body);
  check_model_field(f, served);
  const json* tokens = f.get("tokens");
  f.refuse_unread();
  if (!tokens || !tokens->is_array()) {
    f.fail("tokens", "tokens must be a list of token ids, got " + (tokens ? brief(*tokens) : std::string("nothing")));
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& e = (*tokens)[i];
    // One rule for every id the server takes or gives (docs/architecture.md §8): an id
    // of the model's vocabulary, the rows of its logits. Ids past the tokenizer's (a
    // padded embedding's rows) have no text, in completions as here.
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) ||
        e.get<int64_t>() < 0 || e.get<int64_t>() >= served.vocab_size) {
      f.fail("tokens", "tokens[" + std::to_string(i) + "] is not a token id of the model's vocabulary [0, " +
                           std::to_string(served.vocab_size) + "): " + brief(e));
    }
    ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return {{"prompt", decode_known(tokenizer, ids, false)}};
}

json model_json(const ServedModel& served, int64_t created) {
  return {{"id", served.name},
          {"object", "model"},
          {"created", created},
          {"owned_by", "olmo2"},
          {"max_model_len", served.context_length}};
}

json models_list_json(const ServedModel& served, int64_t created) {
  return {{"object", "list"}, {"data", json::array({model_json(served, created)})}};
}

json model_response(const std::string& id, const ServedModel& served, int64_t created) {
  if (id != served.name) {
    throw ApiError(404, "model", "the model " + brief(json(id)) + " does not exist: this server serves \"" +
                                     served.name + "\"");
  }
  return model_json(served, created);
}

}  // namespace olmo2
