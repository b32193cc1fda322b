// The HTTP front of the server on rank 0: the API's routes (api_routes.h) on the
// asynchronous HTTP/1.1 server of runtime/serve/http/ (docs/architecture.md §8).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "monitoring/serve_metrics.h"
#include "runtime/serve/api/activation_budget.h"
#include "runtime/serve/chat/chat_template.h"
#include "runtime/serve/api/served_model.h"
#include "runtime/serve/serving_engine.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

namespace http {
class Server;
}  // namespace http

struct HttpOptions {
  std::string host = "127.0.0.1";  ///< loopback unless told otherwise
  int port = 8000;
  std::string api_key;             ///< "" = no authentication
  int64_t max_body_bytes = 1 << 20;  ///< larger bodies are refused unread (413, param "body")
  int threads = 64;                ///< HTTP worker threads (each holds one request while it runs)
  /// --max-activation-memory: the bytes of activation reads all requests in the server
  /// may return at worst together (activation_budget.h); 0: no bound.
  int64_t max_activation_memory = 0;
  /// --tool-call-parser (olmo3, hermes, none); "": detected from the chat template.
  std::string tool_call_parser;
};

/// Routes requests to the engine (the routes: api_routes.h). POST /v1/completions and
/// /v1/chat/completions (JSON, or server-sent events with "stream": true ending in
/// `data: [DONE]`), GET /v1/models and /v1/models/{id}, POST /tokenize and /detokenize,
/// GET /health, GET /metrics (Prometheus text). With an API key every
/// endpoint but /health and /metrics needs `Authorization: Bearer KEY` (else 401).
/// Bad requests get 400 and a JSON error naming the field; a full queue or a stopping
/// server 503; a request line over 8 KiB 414, a header over 64 KiB (or one field over
/// 8 KiB) 431, a body over max_body_bytes 413 (then the connection closes). A client
/// that disconnects has its request cancelled (the engine frees its KV blocks). An
/// `X-Request-Id` header is echoed back and is only a label: the response id is the
/// server's own. Every refusal of a completion request is counted in
/// olmo2_serve_requests_total.
class HttpServer {
 public:
  /// Binds host:port and starts serving; throws InputError naming the address when it
  /// cannot listen.
  /// `chat_template` (may be null: chat is refused) must outlive the server; `chat_extra`
  /// holds the model's special tokens the template sees.
  HttpServer(ServingEngine& engine, const Tokenizer& tokenizer, const ServedModel& model,
             monitoring::ServeMetrics& metrics, const HttpOptions& options,
             const ChatTemplate* chat_template = nullptr, nlohmann::json chat_extra = nlohmann::json::object());
  ~HttpServer();
  /// Stops accepting connections, waits for the handlers in flight to return and their
  /// answers to reach the clients (each write bounded by a 30 s deadline). Idempotent.
  void stop();
  const std::string& address() const;  ///< "host:port", the bound port
  int port() const;                     ///< the bound port (the kernel's choice for port 0)

 private:
  std::unique_ptr<ActivationBudget> activation_budget_;  // with max_activation_memory
  std::unique_ptr<http::Server> server_;
};

}  // namespace olmo2
