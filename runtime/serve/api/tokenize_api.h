// The bodies of /tokenize, /detokenize (vLLM's shapes) and /v1/models (OpenAI's), as
// pure functions the routes call (docs/architecture.md §8, API).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/serve/api/chat_request.h"
#include "runtime/serve/api/served_model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// POST /tokenize: {"prompt": string} or {"messages": [...], "add_generation_prompt"
/// (default true)}, with model (must match), add_special_tokens (a bool; changes
/// nothing: the tokenizer adds no special tokens) and return_token_strs (bool) →
/// {"count", "max_model_len", "tokens", "token_strs"} (token_strs: each token's
/// token_display text, or null when not asked). Messages go through check_messages and
/// `render` (empty: refused, no chat template). Exactly one of prompt and messages;
/// unknown fields refused. Throws ApiError 400 naming the field.
nlohmann::json tokenize_response(const std::string& body, const ServedModel& served, const Tokenizer& tokenizer,
                                 const ChatRenderer& render);

/// POST /detokenize: {"tokens": [ids], "model"?} → {"prompt": text} — the ids decoded,
/// special tokens kept, ill-formed UTF-8 replaced by U+FFFD. Ids must be in
/// [0, tokenizer vocabulary). Throws ApiError 400 naming the field.
nlohmann::json detokenize_response(const std::string& body, const ServedModel& served, const Tokenizer& tokenizer);

/// The model object {"id", "object": "model", "created", "owned_by": "olmo2",
/// "max_model_len"}; `created` in Unix seconds (the server's start).
nlohmann::json model_json(const ServedModel& served, int64_t created);

/// GET /v1/models: {"object": "list", "data": [model_json]}.
nlohmann::json models_list_json(const ServedModel& served, int64_t created);

/// GET /v1/models/{id}: model_json when `id` is the served name; else ApiError 404
/// (param "model") naming it.
nlohmann::json model_response(const std::string& id, const ServedModel& served, int64_t created);

}  // namespace olmo2
