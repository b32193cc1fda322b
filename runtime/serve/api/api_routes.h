// The OpenAI-style API on the HTTP front: its routes, the API-key check and the JSON
// errors (docs/architecture.md §8). The transport is runtime/serve/http/.
#pragma once

#include <string>

#include "monitoring/serve_metrics.h"
#include "runtime/serve/api/activation_budget.h"
#include "runtime/serve/chat/chat_template.h"
#include "runtime/serve/api/served_model.h"
#include "runtime/serve/api/tool_fields.h"
#include "runtime/serve/http/http_listener.h"
#include "runtime/serve/serving_engine.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// What the routes use; the engine, tokenizer and metrics must outlive the server.
struct ApiContext {
  ServingEngine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  ServedModel model;
  monitoring::ServeMetrics* metrics = nullptr;
  std::string api_key;  ///< "" = no authentication
  /// /v1/chat/completions and /tokenize's messages render with this (null: refused, 400
  /// naming messages); chat_extra gives the template the model's special tokens
  /// (bos_token, eos_token, … from tokenizer_config.json).
  const ChatTemplate* chat_template = nullptr;
  nlohmann::json chat_extra = nlohmann::json::object();
  /// Whether the template takes tools, and the model's call syntax (tool_fields.h).
  ChatToolSupport tool_support{};
  int64_t created = 0;  ///< the server's start, Unix seconds (the model object's "created")
  /// The server-wide bound on activation reads (null: none): a request with reads
  /// reserves their worst case before it is submitted, and waits for room.
  ActivationBudget* activation_budget = nullptr;
};

/// Installs on `server` (before it starts): POST /v1/completions and
/// /v1/chat/completions (completion_request.h, chat_request.h: one engine request per
/// prompt, answered through response_assembler.h, streamed or whole), GET /v1/models and
/// /v1/models/{id}, POST /tokenize and /detokenize (tokenize_api.h), GET /health, GET
/// /metrics; a refusal by the engine's own checks (InputError) is a 400, a full server a
/// 503 for the whole batch; the guard that answers 401 without `Authorization: Bearer
/// KEY` (scheme in any case) on every path but /health and /metrics, before any body is
/// read; and the formatter that makes every refusal {"error": {...}} (error_json) and
/// counts those of the two generating endpoints in olmo2_serve_requests_total ("invalid" for 4xx,
/// "rejected" for 503, "error" for another 5xx).
void install_api_routes(http::Server& server, const ApiContext& context);

}  // namespace olmo2
