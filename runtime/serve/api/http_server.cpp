#include "runtime/serve/api/http_server.h"

#include <algorithm>
#include <chrono>

#include "runtime/serve/api/api_routes.h"
#include "runtime/serve/http/http_listener.h"

namespace olmo2 {

HttpServer::HttpServer(ServingEngine& engine, const Tokenizer& tokenizer, const ServedModel& model,
                       monitoring::ServeMetrics& metrics, const HttpOptions& options,
                       const ChatTemplate* chat_template, nlohmann::json chat_extra) {
  if (options.port < 0 || options.port > 65535) {
    OLMO2_THROW(InputError, "--port must be in 1…65535 (or 0: any free one), got ", options.port);
  }
  http::ServerOptions so;
  so.host = options.host;
  so.port = options.port;
  so.max_body_bytes = options.max_body_bytes;
  so.workers = std::max(options.threads, 4);
  server_ = std::make_unique<http::Server>(so);
  ApiContext context{&engine, &tokenizer, model, &metrics, options.api_key};
  if (options.max_activation_memory > 0) {
    activation_budget_ = std::make_unique<ActivationBudget>(options.max_activation_memory, &metrics);
    context.activation_budget = activation_budget_.get();
  }
  context.chat_template = chat_template;
  context.chat_extra = std::move(chat_extra);
  if (chat_template) {  // tools need a template that reads them (docs/architecture.md §8, "Tool calls")
    context.tool_support.template_takes_tools = chat_template->reads_variable("tools");
    context.tool_support.format = options.tool_call_parser.empty() ? detect_tool_call_format(chat_template->source())
                                                                   : tool_call_format_from_name(options.tool_call_parser);
  }
  context.created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
  install_api_routes(*server_, context);
  server_->start();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() {
  if (server_) server_->stop();
}

const std::string& HttpServer::address() const { return server_->address(); }

int HttpServer::port() const { return server_->port(); }

}  // namespace olmo2
