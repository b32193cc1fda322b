// The OpenAI-style /v1/completions request and response bodies (JSON, nlohmann-json).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/serve/serve_request.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// A request the API refuses: HTTP `status` with {"error": {"message", "type", "param"}}.
class ApiError : public InputError {
 public:
  ApiError(int status, std::string param, const std::string& message)
      : InputError(message, __FILE__, __LINE__), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  /// The offending field ("" when none).
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string param_;
};

/// What the server serves, for validation and /v1/models.
struct ServedModel {
  std::string name;             ///< the "model" a request must name (when it names one)
  int64_t context_length = 0;   ///< max_position_embeddings
  int64_t vocab_size = 0;
  int64_t cache_tokens = 0;     ///< positions the whole KV cache holds
};

/// Parses and validates a /v1/completions body. Fields: prompt (a string, or a list of
/// token ids; required, non-empty), max_tokens (≥ 1, default 16), temperature (≥ 0,
/// default 1 as OpenAI; 0 = greedy), top_p (in (0, 1], default 1), top_k (≥ 0, or −1
/// for none), seed (an integer; `fallback_seed` when absent), stop (a string or a list
/// of up to 16 non-empty strings), stream (bool), logprobs (0 … 20), n (1 only), echo
/// (false only), model (must be `model.name` when given), ignore_eos (bool, vLLM's
/// extension); presence/frequency penalties other than 0 and best_of other than 1 are
/// refused. A prompt must leave room for max_tokens within the context length and the
/// KV cache: prompt + max_tokens over either is refused, stating the numbers (it is
/// never cut). Other fields are ignored. Throws ApiError (400) naming the field.
CompletionParams parse_completion_request(const std::string& body, const ServedModel& model,
                                          const Tokenizer& tokenizer, uint64_t fallback_seed);

/// {"error": {"message", "type", "param", "code"}}; type from the status
/// (invalid_request_error, authentication_error, service_unavailable, server_error).
nlohmann::json error_json(int status, const std::string& message, const std::string& param);

/// The OpenAI legacy-completions logprobs object of `tokens`: tokens (their text),
/// token_logprobs, top_logprobs (one {text: logprob} object per token), text_offset
/// (character offsets, as OpenAI's, from `offset`: the characters already returned); at
/// most `top` alternatives per token.
nlohmann::json logprobs_json(const std::vector<SelectedToken>& tokens, const Tokenizer& tokenizer, int64_t offset,
                             int32_t top);

/// Serialises with invalid UTF-8 replaced (token texts may hold partial characters).
std::string dump_json(const nlohmann::json& j);

}  // namespace olmo2
