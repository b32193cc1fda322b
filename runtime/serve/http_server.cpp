#include "runtime/serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <random>

namespace olmo2 {

namespace {
using nlohmann::json;

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "") {
  res.status = status;
  res.set_content(dump_json(error_json(status, message, param)), "application/json");
}

/// One choice object of a response or a stream event.
json choice(const CompletionChunk& c, const CompletionParams& p, const Tokenizer& tok, int64_t offset) {
  json ch = {{"index", 0}, {"text", c.text}, {"logprobs", nullptr},
             {"finish_reason", c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason)}};
  if (p.want_logprobs) ch["logprobs"] = logprobs_json(c.tokens, tok, offset, p.logprobs);
  return ch;
}
}  // namespace

HttpServer::HttpServer(ServingEngine& engine, const Tokenizer& tokenizer, const ServedModel& model,
                       monitoring::ServeMetrics& metrics, const HttpOptions& options)
    : engine_(engine), tokenizer_(tokenizer), model_(model), metrics_(metrics), opt_(options),
      server_(std::make_unique<httplib::Server>()) {
  if (opt_.port < 1 || opt_.port > 65535) OLMO2_THROW(InputError, "--port must be in 1…65535, got ", opt_.port);
  if (opt_.host.empty()) OLMO2_THROW(InputError, "--host must not be empty");
  address_ = (opt_.host.find(':') != std::string::npos ? "[" + opt_.host + "]" : opt_.host) + ":" +
             std::to_string(opt_.port);
  const int threads = std::max(opt_.threads, 4);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // No SO_REUSEPORT (httplib's default): a second server must not share the port.
  socket_t listening = INVALID_SOCKET;
  server_->set_socket_options([&listening](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listening = sock;
  });
  // Bodies up to 64 MiB are read and refused by size with a JSON error; larger ones
  // get httplib's 413 without being read.
  server_->set_payload_max_length(std::max<int64_t>(opt_.max_body_bytes, 64 << 20));
  // Each streamed event is one small write: without TCP_NODELAY the first waits ~40 ms
  // for the client's delayed ACK (measured: every TTFT 42 ms on the small model).
  server_->set_tcp_nodelay(true);
  routes();
  if (!server_->bind_to_port(opt_.host, opt_.port)) {
    OLMO2_THROW(InputError, "cannot listen on ", address_, " (port in use, or not an address of this machine)");
  }
  // httplib listens with a backlog of 5: a burst of clients overflowed it (dropped
  // handshakes, then failed reads). Linux lets listen() raise it on the bound socket.
  if (listening != INVALID_SOCKET) ::listen(listening, 1024);
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpServer::routes() {
  httplib::Server& s = *server_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opt_.api_key.empty() || req.path == "/health" || req.path == "/metrics") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    // The scheme is case-insensitive (RFC 9110 §11.1), the key is not.
    std::string auth = req.get_header_value("Authorization");
    for (size_t i = 0; i < std::min<size_t>(auth.size(), 7); ++i) auth[i] = static_cast<char>(std::tolower(auth[i]));
    if (auth != "bearer " + opt_.api_key) {
      if (req.path == "/v1/completions") metrics_.request_finished("invalid");
      send_error(res, 401, "missing or wrong API key: send the header 'Authorization: Bearer <key>'");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const bool known = req.path == "/v1/completions" || req.path == "/v1/models" || req.path == "/health" ||
                       req.path == "/metrics";
    if (res.status == 404 && known) {  // the path exists, the method does not
      res.status = 405;
      res.set_header("Allow", req.path == "/v1/completions" ? "POST" : "GET");
    }
    if (req.path == "/v1/completions" && res.status >= 400 && res.status < 500) metrics_.request_finished("invalid");
    const std::string msg = res.status == 413   ? "the request body is too large"
                            : res.status == 404 ? "no such endpoint"
                            : res.status == 405 ? req.method + " is not allowed on " + req.path
                                                : "HTTP error " + std::to_string(res.status);
    res.set_content(dump_json(error_json(res.status, msg, res.status == 413 ? "body" : "")), "application/json");
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (engine_.stopping()) return send_error(res, 503, "shutting down");
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json m = {{"id", model_.name}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "olmo2"},
                    {"max_model_len", model_.context_length}};
    res.set_content(dump_json({{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });
  // The body is read here, not by httplib: httplib would cap a body sent as a form
  // (curl's default Content-Type) at 8 KiB, and read a too-large one to the end.
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res,
                                   const httplib::ContentReader& content_reader) {
    if (req.has_header("X-Request-Id")) res.set_header("X-Request-Id", req.get_header_value("X-Request-Id"));
    std::string body;
    bool too_large = false;
    content_reader([&](const char* data, size_t n) {
      if (static_cast<int64_t>(body.size() + n) > opt_.max_body_bytes) {
        too_large = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    CompletionParams params;
    try {
      if (too_large) {
        throw ApiError(400, "body", "the request body is over the limit of " + std::to_string(opt_.max_body_bytes) +
                                        " bytes (--max-body-bytes)");
      }
      static thread_local std::mt19937_64 seeds{std::random_device{}()};
      params = parse_completion_request(body, model_, tokenizer_, seeds());
    } catch (const ApiError& e) {
      metrics_.request_finished("invalid");
      return send_error(res, e.status(), e.what(), e.param());
    } catch (const std::exception& e) {  // e.g. a tokenizer error: still the request's fault
      metrics_.request_finished("invalid");
      return send_error(res, 400, e.what());
    }
    std::shared_ptr<ServeRequest> r;
    try {
      r = engine_.submit(params);
    } catch (const ServiceUnavailable& e) {
      metrics_.request_finished("rejected");
      return send_error(res, 503, e.what());
    }
    const std::string id = "cmpl-" + std::to_string(r->id());
    const int64_t created = unix_time();
    const json head = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model_.name}};
    const int64_t prompt_tokens = static_cast<int64_t>(r->params().prompt.size());
    auto usage = [prompt_tokens](int64_t generated) {
      return json{{"prompt_tokens", prompt_tokens}, {"completion_tokens", generated},
                  {"total_tokens", prompt_tokens + generated}};
    };
    if (!params.stream) {
      CompletionChunk all;
      int64_t generated = 0;
      for (;;) {
        std::optional<CompletionChunk> c = r->next(std::chrono::milliseconds(200));
        if (!c) continue;
        all.text += c->text;
        generated += static_cast<int64_t>(c->tokens.size());
        all.tokens.insert(all.tokens.end(), c->tokens.begin(), c->tokens.end());
        if (!c->finish_reason.empty() || !c->error.empty()) {
          all.finish_reason = c->finish_reason;
          all.error = c->error;
          break;
        }
      }
      if (!all.error.empty()) return send_error(res, all.error.rfind("internal", 0) == 0 ? 500 : 503, all.error);
      json out = head;
      out["choices"] = json::array({choice(all, r->params(), tokenizer_, 0)});
      out["usage"] = usage(generated);
      return res.set_content(dump_json(out), "application/json");
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, r, head, usage](size_t, httplib::DataSink& sink) {
      int64_t generated = 0, offset = 0;
      auto send = [&](const std::string& data) {
        const std::string event = "data: " + data + "\n\n";
        return sink.write(event.data(), event.size());
      };
      for (;;) {
        std::optional<CompletionChunk> c = r->next(std::chrono::milliseconds(200));
        if (!c) continue;
        generated += static_cast<int64_t>(c->tokens.size());
        bool ok;
        if (!c->error.empty()) {
          ok = send(dump_json(error_json(503, c->error, "")));
        } else {
          json ev = head;
          ev["choices"] = json::array({choice(*c, r->params(), tokenizer_, offset)});
          for (const char ch : c->text) offset += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
          if (!c->finish_reason.empty()) ev["usage"] = usage(generated);
          ok = send(dump_json(ev));
        }
        if (!ok) {  // the client is gone: free its sequence
          r->cancel();
          return false;
        }
        if (!c->finish_reason.empty() || !c->error.empty()) break;
      }
      send("[DONE]");
      sink.done();
      return true;
    });
  });
}

}  // namespace olmo2
