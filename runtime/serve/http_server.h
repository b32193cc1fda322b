// The HTTP front of the server (cpp-httplib, on rank 0): /v1/completions,
// /v1/models, /health, /metrics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "monitoring/serve_metrics.h"
#include "runtime/serve/completion_api.h"
#include "runtime/serve/serving_engine.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace olmo2 {

struct HttpOptions {
  std::string host = "127.0.0.1";  ///< loopback unless told otherwise
  int port = 8000;
  std::string api_key;             ///< "" = no authentication
  int64_t max_body_bytes = 1 << 20;  ///< larger bodies are refused (400, param "body")
  int threads = 64;                ///< HTTP worker threads (each holds one request while it runs)
};

/// Routes requests to the engine. POST /v1/completions (OpenAI legacy completions:
/// JSON, or server-sent events with "stream": true ending in `data: [DONE]`), GET
/// /v1/models, GET /health, GET /metrics (Prometheus text). With an API key every
/// endpoint but /health and /metrics needs `Authorization: Bearer KEY` (else 401).
/// Bad requests get 400 and a JSON error naming the field; a full queue or a stopping
/// server 503. A streaming client that disconnects has its request cancelled (the
/// engine frees its KV blocks). An `X-Request-Id` header is echoed back and is only a
/// label: the response id is the server's own. Every refusal is counted in
/// olmo2_serve_requests_total.
class HttpServer {
 public:
  /// Binds host:port; throws InputError naming the address when it cannot.
  HttpServer(ServingEngine& engine, const Tokenizer& tokenizer, const ServedModel& model,
             monitoring::ServeMetrics& metrics, const HttpOptions& options);
  ~HttpServer();
  /// Stops accepting connections and waits for the handlers in flight to return.
  void stop();
  const std::string& address() const { return address_; }

 private:
  void routes();
  ServingEngine& engine_;
  const Tokenizer& tokenizer_;
  ServedModel model_;
  monitoring::ServeMetrics& metrics_;
  HttpOptions opt_;
  std::string address_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace olmo2
