#include "runtime/serve/completion_api.h"

namespace olmo2 {

CompletionParams parse_completion_request(const std::string& body, const ServedModel& model,
                                          const Tokenizer& tokenizer, uint64_t fallback_seed) {
  ApiRequest r = parse_completions(body, model, tokenizer, fallback_seed);
  const auto refuse = [](const char* param, const std::string& message) { throw ApiError(400, param, message); };
  if (r.prompts.size() != 1) refuse("prompt", "prompt: a list of prompts is not supported (one prompt per request)");
  if (r.n != 1) refuse("n", "n must be 1: one completion per request");
  if (r.best_of != 1) refuse("best_of", "best_of must be 1");
  if (r.echo) refuse("echo", "echo is not supported");
  if (r.return_tokens_as_token_ids) refuse("return_tokens_as_token_ids", "return_tokens_as_token_ids is not supported");
  // The route's text offsets (logprobs_json) count the text with special tokens skipped.
  if (!r.prompts[0].skip_special_tokens) {
    refuse("skip_special_tokens", "skip_special_tokens false is not supported by this route yet");
  }
  return std::move(r.prompts[0]);
}

nlohmann::json logprobs_json(const std::vector<SelectedToken>& tokens, const Tokenizer& tokenizer, int64_t offset,
                             int32_t top) {
  CompletionLogprobs lp(tokenizer, top, false);
  TextOffsets offsets(tokenizer, true, offset);
  for (const SelectedToken& t : tokens) lp.add(t, offsets.push(t.id));
  return lp.value();
}

}  // namespace olmo2
