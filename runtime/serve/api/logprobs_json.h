// The logprobs objects of the completions and chat APIs (docs/architecture.md §8, API).
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/generation/token_selection.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// One position's top_logprobs object of the legacy completions API: {display text:
/// logprob}. Holds the chosen token and the first `top` of t.top (up to top + 1 entries,
/// as OpenAI and vLLM: the sampled token is always there). Texts are token_display's.
/// No alternative is lost to a shared text (a JSON object cannot hold a key twice, and
/// vLLM's dict keeps only the last of them): keys are given in order — the chosen token
/// first, then the alternatives most likely first (token selection's order: higher
/// log-probability, then lower id) — and a token whose text is already a key is keyed
/// "token_id:ID" instead. Deterministic, and the chosen token is always under the text
/// `tokens` shows for it.
nlohmann::json completion_top_logprobs(const SelectedToken& t, int32_t top, const Tokenizer& tokenizer, bool as_ids);

/// Builds the legacy completions logprobs object {tokens, token_logprobs, top_logprobs,
/// text_offset}, one entry per token added.
class CompletionLogprobs {
 public:
  CompletionLogprobs(const Tokenizer& tokenizer, int32_t top, bool as_ids);
  /// Appends `t` whose text starts at character `offset` of the choice's text. `scored`
  /// false (the first token of an echoed prompt, which nothing predicts): its logprob and
  /// top_logprobs are null.
  void add(const SelectedToken& t, int64_t offset, bool scored = true);
  const nlohmann::json& value() const { return j_; }

 private:
  const Tokenizer& tokenizer_;
  int32_t top_;
  bool as_ids_;
  nlohmann::json j_;
};

/// One element of chat's logprobs.content: {token, logprob, bytes, top_logprobs: [{token,
/// logprob, bytes}, …]} with the first `top` of t.top, most likely first (a list: texts
/// may repeat). bytes: the token's raw bytes as integers (null for an id the tokenizer
/// has no text for), also with `as_ids`, so that partial characters can be rejoined.
nlohmann::json chat_logprob_entry(const SelectedToken& t, int32_t top, const Tokenizer& tokenizer, bool as_ids);

}  // namespace olmo2
