#include "runtime/serve/api_routes.h"

#include <chrono>
#include <memory>
#include <optional>
#include <random>

#include "runtime/serve/http/response_writer.h"

namespace olmo2 {

namespace {
using nlohmann::json;
using Context = std::shared_ptr<const ApiContext>;

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// Compares without stopping at the first difference (the time taken does not tell
/// how much of a guessed key was right).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
  return diff == 0;
}

/// One choice object of a response or a stream event.
json choice(const CompletionChunk& c, const CompletionParams& p, const Tokenizer& tok, int64_t offset) {
  json ch = {{"index", 0}, {"text", c.text}, {"logprobs", nullptr},
             {"finish_reason", c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason)}};
  if (p.want_logprobs) ch["logprobs"] = logprobs_json(c.tokens, tok, offset, p.logprobs);
  return ch;
}

void send_json(http::ResponseWriter& w, int status, const json& body, const http::Headers& extra) {
  w.send(status, "application/json", dump_json(body), extra);
}

/// Waits for the rest of a non-streamed request and answers it whole. A client that
/// hangs up meanwhile has its request cancelled.
void answer_whole(const ApiContext& c, ServeRequest& r, const json& head, http::ResponseWriter& w,
                  const http::Headers& extra) {
  CompletionChunk all;
  int64_t generated = 0;
  for (;;) {
    if (w.client_gone()) {  // nobody will read the answer: free the sequence now
      r.cancel();
      return w.abort();
    }
    std::optional<CompletionChunk> ch = r.next(std::chrono::milliseconds(200));
    if (!ch) continue;
    all.text += ch->text;
    generated += static_cast<int64_t>(ch->tokens.size());
    all.tokens.insert(all.tokens.end(), ch->tokens.begin(), ch->tokens.end());
    if (!ch->finish_reason.empty() || !ch->error.empty()) {
      all.finish_reason = ch->finish_reason;
      all.error = ch->error;
      all.error_status = ch->error_status;
      break;
    }
  }
  if (!all.error.empty()) {
    const int status = engine_error_status(all);
    return send_json(w, status, error_json(status, all.error, ""), extra);
  }
  const int64_t prompt_tokens = static_cast<int64_t>(r.params().prompt.size());
  json out = head;
  out["choices"] = json::array({choice(all, r.params(), *c.tokenizer, 0)});
  out["usage"] = {{"prompt_tokens", prompt_tokens}, {"completion_tokens", generated},
                  {"total_tokens", prompt_tokens + generated}};
  send_json(w, 200, out, extra);
}

/// Streams a request as server-sent events ending in `data: [DONE]`; an engine error
/// is one event {"error": …} (its code the status a non-streamed request would get)
/// before [DONE]. A client that hangs up has its request cancelled.
void answer_streamed(const ApiContext& c, ServeRequest& r, const json& head, http::ResponseWriter& w,
                     http::Headers extra) {
  extra.add("Cache-Control", "no-cache");
  auto event = [&](const std::string& data) { return w.write("data: " + data + "\n\n"); };
  bool ok = w.begin_stream(200, "text/event-stream", extra);
  const int64_t prompt_tokens = static_cast<int64_t>(r.params().prompt.size());
  int64_t generated = 0, offset = 0;
  while (ok) {
    std::optional<CompletionChunk> ch = r.next(std::chrono::milliseconds(200));
    if (!ch || w.client_gone()) {
      ok = !w.client_gone();
      continue;
    }
    generated += static_cast<int64_t>(ch->tokens.size());
    if (!ch->error.empty()) {
      const int status = engine_error_status(*ch);
      ok = event(dump_json(error_json(status, ch->error, "")));
      break;
    }
    json ev = head;
    ev["choices"] = json::array({choice(*ch, r.params(), *c.tokenizer, offset)});
    for (const char b : ch->text) offset += (static_cast<unsigned char>(b) & 0xC0) != 0x80;
    if (!ch->finish_reason.empty()) {
      ev["usage"] = {{"prompt_tokens", prompt_tokens}, {"completion_tokens", generated},
                     {"total_tokens", prompt_tokens + generated}};
    }
    ok = event(dump_json(ev));
    if (!ch->finish_reason.empty()) break;
  }
  if (!ok) {  // the client is gone: free its sequence
    r.cancel();
    return w.abort();
  }
  event("[DONE]");
  w.end();
}

void completions(const ApiContext& c, const http::Request& req, http::ResponseWriter& w) {
  http::Headers extra;
  if (const std::string* id = req.headers.find("X-Request-Id")) extra.add("X-Request-Id", *id);
  CompletionParams params;
  try {
    static thread_local std::mt19937_64 seeds{std::random_device{}()};
    params = parse_completion_request(req.body, c.model, *c.tokenizer, seeds());
  } catch (const ApiError& e) {
    c.metrics->request_finished("invalid");
    return send_json(w, e.status(), error_json(e.status(), e.what(), e.param()), extra);
  } catch (const std::exception& e) {  // e.g. a tokenizer error: still the request's fault
    c.metrics->request_finished("invalid");
    return send_json(w, 400, error_json(400, e.what(), ""), extra);
  }
  std::shared_ptr<ServeRequest> r;
  try {
    r = c.engine->submit(params);
  } catch (const ServiceUnavailable& e) {
    c.metrics->request_finished("rejected");
    return send_json(w, 503, error_json(503, e.what(), ""), extra);
  }
  const json head = {{"id", "cmpl-" + std::to_string(r->id())}, {"object", "text_completion"},
                     {"created", unix_time()}, {"model", c.model.name}};
  if (params.stream) return answer_streamed(c, *r, head, w, extra);
  answer_whole(c, *r, head, w, extra);
}
}  // namespace

int engine_error_status(const CompletionChunk& chunk) {
  if (chunk.error_status != 0) return chunk.error_status;
  return chunk.error.rfind("internal", 0) == 0 ? 500 : 503;
}

void install_api_routes(http::Server& server, const ApiContext& context) {
  const Context c = std::make_shared<const ApiContext>(context);
  server.set_guard([c](const http::Request& req) -> std::optional<http::Refusal> {
    if (c->api_key.empty() || req.path == "/health" || req.path == "/metrics") return std::nullopt;
    // The scheme is case-insensitive (RFC 9110 §11.1), the key is not.
    const std::string auth = req.headers.get("Authorization");
    if (auth.size() > 7 && http::iequals(auth.substr(0, 7), "bearer ") && same_secret(auth.substr(7), c->api_key)) {
      return std::nullopt;
    }
    return http::Refusal{401, "missing or wrong API key: send the header 'Authorization: Bearer <key>'", "",
                         {{"WWW-Authenticate", "Bearer"}}};
  });
  server.set_refusal_formatter([c](const http::Refusal& r, const http::Request& req) {
    if (req.path == "/v1/completions" && r.status >= 400) {
      c->metrics->request_finished(r.status < 500 ? "invalid" : r.status == 503 ? "rejected" : "error");
    }
    return std::make_pair(std::string("application/json"), dump_json(error_json(r.status, r.message, r.param)));
  });
  server.route("GET", "/health", [c](const http::Request&, http::ResponseWriter& w) {
    if (c->engine->stopping()) return send_json(w, 503, error_json(503, "shutting down", ""), {});
    w.send(200, "application/json", "{\"status\":\"ok\"}");
  });
  server.route("GET", "/metrics", [c](const http::Request&, http::ResponseWriter& w) {
    w.send(200, "text/plain; version=0.0.4; charset=utf-8", c->metrics->scrape());
  });
  server.route("GET", "/v1/models", [c](const http::Request&, http::ResponseWriter& w) {
    const json m = {{"id", c->model.name}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "olmo2"},
                    {"max_model_len", c->model.context_length}};
    send_json(w, 200, {{"object", "list"}, {"data", json::array({m})}}, {});
  });
  server.route("POST", "/v1/completions",
               [c](const http::Request& req, http::ResponseWriter& w) { completions(*c, req, w); });
}

}  // namespace olmo2
