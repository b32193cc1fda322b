#include "runtime/serve/http_server.h"

#include <algorithm>

#include "runtime/serve/api_routes.h"
#include "runtime/serve/http/http_listener.h"

namespace olmo2 {

HttpServer::HttpServer(ServingEngine& engine, const Tokenizer& tokenizer, const ServedModel& model,
                       monitoring::ServeMetrics& metrics, const HttpOptions& options) {
  if (options.port < 1 || options.port > 65535) OLMO2_THROW(InputError, "--port must be in 1…65535, got ", options.port);
  http::ServerOptions so;
  so.host = options.host;
  so.port = options.port;
  so.max_body_bytes = options.max_body_bytes;
  so.workers = std::max(options.threads, 4);
  server_ = std::make_unique<http::Server>(so);
  install_api_routes(*server_, ApiContext{&engine, &tokenizer, model, &metrics, options.api_key});
  server_->start();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() {
  if (server_) server_->stop();
}

const std::string& HttpServer::address() const { return server_->address(); }

}  // namespace olmo2
