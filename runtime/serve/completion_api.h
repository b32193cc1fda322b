// The OpenAI-compatible API's pieces in one include (docs/architecture.md §8, API), and
// the single-prompt entry points the current /v1/completions route calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/serve/api_error.h"
#include "runtime/serve/api_request.h"
#include "runtime/serve/chat_request.h"
#include "runtime/serve/chat_response.h"
#include "runtime/serve/completion_request.h"
#include "runtime/serve/completion_response.h"
#include "runtime/serve/logprobs_json.h"
#include "runtime/serve/response_id.h"
#include "runtime/serve/served_model.h"
#include "runtime/serve/serve_request.h"
#include "runtime/serve/token_text.h"
#include "runtime/serve/tokenize_api.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// parse_completions (completion_request.h) for the current route, which handles one
/// prompt, one choice and no echo: refuses, naming the field, a list of prompts (prompt),
/// n ≠ 1, best_of ≠ 1, echo, return_tokens_as_token_ids and skip_special_tokens false
/// (its text offsets count the text without special tokens); returns the one prompt's
/// params (the engine applies logit_bias, the penalties, min_p, min_tokens,
/// stop_token_ids and include_stop_str_in_output). Throws ApiError (400).
CompletionParams parse_completion_request(const std::string& body, const ServedModel& model,
                                          const Tokenizer& tokenizer, uint64_t fallback_seed);

/// The legacy completions logprobs object of `tokens` (CompletionLogprobs): text
/// offsets from `offset` (the characters already returned), counting the text decoded
/// with special tokens skipped; at most `top` alternatives per token plus the chosen one.
nlohmann::json logprobs_json(const std::vector<SelectedToken>& tokens, const Tokenizer& tokenizer, int64_t offset,
                             int32_t top);

}  // namespace olmo2
