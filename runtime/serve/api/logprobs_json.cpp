#include "runtime/serve/api/logprobs_json.h"

#include <algorithm>

#include "runtime/serve/api/token_text.h"

namespace olmo2 {

using nlohmann::json;

json completion_top_logprobs(const SelectedToken& t, int32_t top, const Tokenizer& tokenizer, bool as_ids) {
  json out = json::object();
  const auto put = [&](int32_t id, float logprob) {
    std::string key = token_display(tokenizer, id, as_ids);
    if (out.contains(key)) key = token_display(tokenizer, id, true);
    out[key] = api_logprob(logprob);
  };
  put(t.id, t.logprob);
  const size_t n = std::min(t.top.size(), static_cast<size_t>(std::max(top, 0)));
  for (size_t k = 0; k < n; ++k) {
    if (t.top[k].id != t.id) put(t.top[k].id, t.top[k].logit);
  }
  return out;
}

CompletionLogprobs::CompletionLogprobs(const Tokenizer& tokenizer, int32_t top, bool as_ids)
    : tokenizer_(tokenizer), top_(top), as_ids_(as_ids),
      j_({{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}}) {}

void CompletionLogprobs::add(const SelectedToken& t, int64_t offset, bool scored) {
  j_["tokens"].push_back(token_display(tokenizer_, t.id, as_ids_));
  j_["token_logprobs"].push_back(scored ? json(api_logprob(t.logprob)) : json(nullptr));
  j_["top_logprobs"].push_back(scored ? completion_top_logprobs(t, top_, tokenizer_, as_ids_) : json(nullptr));
  j_["text_offset"].push_back(offset);
}

namespace {
json bytes_of(const Tokenizer& tokenizer, int32_t id) {
  if (id < 0 || id >= tokenizer.vocab_size()) return nullptr;
  json b = json::array();
  for (const char ch : token_raw_bytes(tokenizer, id)) b.push_back(static_cast<unsigned char>(ch));
  return b;
}
}  // namespace

json chat_logprob_entry(const SelectedToken& t, int32_t top, const Tokenizer& tokenizer, bool as_ids) {
  json alternatives = json::array();
  const size_t n = std::min(t.top.size(), static_cast<size_t>(std::max(top, 0)));
  for (size_t k = 0; k < n; ++k) {
    alternatives.push_back({{"token", token_display(tokenizer, t.top[k].id, as_ids)},
                            {"logprob", api_logprob(t.top[k].logit)},
                            {"bytes", bytes_of(tokenizer, t.top[k].id)}});
  }
  return {{"token", token_display(tokenizer, t.id, as_ids)},
          {"logprob", api_logprob(t.logprob)},
          {"bytes", bytes_of(tokenizer, t.id)},
          {"top_logprobs", alternatives}};
}

}  // namespace olmo2
