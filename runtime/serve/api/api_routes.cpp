#include "runtime/serve/api/api_routes.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>

#include "runtime/serve/api/api_error.h"
#include "runtime/serve/api/chat_request.h"
#include "runtime/serve/api/chat_response.h"
#include "runtime/serve/api/completion_request.h"
#include "runtime/serve/api/completion_response.h"
#include "runtime/serve/api/response_id.h"
#include "runtime/serve/api/tokenize_api.h"
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

void send_json(http::ResponseWriter& w, int status, const json& body, const http::Headers& extra) {
  w.send(status, "application/json", dump_json(body), extra);
}

/// A refusal of the request itself (4xx), counted as the client's mistake.
void refuse(const ApiContext& c, http::ResponseWriter& w, int status, const std::string& message,
            const std::string& param, const http::Headers& extra) {
  c.metrics->request_finished("invalid");
  send_json(w, status, error_json(status, message, param), extra);
}

/// The renderer of chat messages: the server's chat template with the model's special
/// tokens; none when the server has no template (chat is refused).
ChatRenderer chat_renderer(const ApiContext& c) {
  if (!c.chat_template) return ChatRenderer();
  // The special tokens, ordered like the messages (the overload that keeps key order).
  auto extra = std::make_shared<const nlohmann::ordered_json>(nlohmann::ordered_json::parse(c.chat_extra.dump()));
  return [&c, extra](const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools) {
    if (tools.is_null()) return c.chat_template->render(messages, add_generation_prompt, *extra);
    nlohmann::ordered_json vars = *extra;
    vars["tools"] = tools;
    return c.chat_template->render(messages, add_generation_prompt, vars);
  };
}

/// Reads every request's chunks into the assembler until it is done: what is there from
/// every request, then, when nothing was, a sleep until the next event — a chunk of any
/// of them (ServeRequest::bind) or the client hanging up (ResponseWriter::on_client_gone)
/// wakes it; no timeouts, no polling. Streamed: each event is written as it comes; a
/// client that hangs up has every request cancelled (the engine frees their KV blocks)
/// and the response abandoned.
void drive(std::vector<std::shared_ptr<ServeRequest>>& requests, ResponseAssembler& a, http::ResponseWriter& w,
           bool stream) {
  const auto wakeup = std::make_shared<Wakeup>();
  for (auto& r : requests) r->bind(wakeup);
  w.on_client_gone([wakeup] { wakeup->notify(); });
  // A request is finished when its error came, or the last of its choices finished.
  std::vector<bool> finished(requests.size(), false);
  std::vector<int32_t> ended(requests.size(), 0);
  // Feeds one chunk; false when the client is gone.
  auto take = [&](size_t i, const CompletionChunk& ch) {
    if (!ch.error.empty() || (!ch.finish_reason.empty() && ++ended[i] >= requests[i]->params().choices)) {
      finished[i] = true;
    }
    for (const std::string& event : a.feed(i, ch)) {
      if (stream && !w.write(event)) return false;
    }
    return true;
  };
  while (!a.done()) {
    const uint64_t seen = wakeup->epoch();  // before looking: an event after it ends the wait
    bool ok = !w.client_gone(), got = false;
    for (size_t i = 0; ok && i < requests.size() && !a.done(); ++i) {
      while (ok && !finished[i]) {
        std::optional<CompletionChunk> ch = requests[i]->next(std::chrono::milliseconds(0));
        if (!ch) break;
        got = true;
        ok = take(i, *ch);
      }
    }
    if (!ok) {
      for (auto& r : requests) r->cancel();
      return w.abort();
    }
    // Every request has ended: nothing more will come (the assembler is done by now).
    if (std::all_of(finished.begin(), finished.end(), [](bool f) { return f; })) break;
    if (!got && !a.done()) wakeup->wait(seen);
  }
  // An error ended the response: the batch's other prompts are not needed any more.
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!finished[i]) requests[i]->cancel();
  }
}

/// POST /v1/completions and /v1/chat/completions: parse (ApiRequest), submit one engine
/// request per prompt, assemble the answer (one body, or the stream's events).
void generate(const ApiContext& c, const http::Request& req, http::ResponseWriter& w, ApiEndpoint endpoint) {
  http::Headers extra;
  if (const std::string* id = req.headers.find("X-Request-Id")) extra.add("X-Request-Id", *id);
  ApiRequest api;
  try {
    static thread_local std::mt19937_64 seeds{std::random_device{}()};
    if (endpoint == ApiEndpoint::Completions) {
      api = parse_completions(req.body, c.model, *c.tokenizer, seeds());
    } else {
      const ChatRenderer render = chat_renderer(c);
      if (!render) {
        return refuse(c, w, 400, "this server has no chat template: the model directory's tokenizer_config.json has "
                      "none it can run; start it with --chat-template FILE", "messages", extra);
      }
      api = parse_chat(req.body, c.model, *c.tokenizer, render, seeds(), c.tool_support);
    }
  } catch (const ApiError& e) {
    return refuse(c, w, e.status(), e.what(), e.param(), extra);
  } catch (const std::exception& e) {  // a tokenizer or template error: still the request's fault
    return refuse(c, w, 400, e.what(), "", extra);
  }
  // The server-wide bound on reads (--max-activation-memory): this request's worst case
  // is reserved before it runs, waiting for earlier ones to finish (docs/architecture.md §13).
  ActivationBudget::Lease reads;
  if (api.activation_bytes > 0 && c.activation_budget) {
    try {
      ActivationBudget* budget = c.activation_budget;
      w.on_client_gone([budget] { budget->wake(); });  // a hang-up ends the wait at once
      reads = budget->acquire(api.activation_bytes, [&] { return w.client_gone(); });
    } catch (const InputError& e) {
      return refuse(c, w, 400, e.what(), "activations", extra);
    }
    if (reads.bytes() == 0) {  // the client hung up while it waited
      c.metrics->request_finished("cancelled");
      return w.abort();
    }
  }
  std::vector<std::shared_ptr<ServeRequest>> requests;
  try {
    for (const CompletionParams& p : api.prompts) requests.push_back(c.engine->submit(p));
  } catch (const ServiceUnavailable& e) {
    for (auto& r : requests) r->cancel();  // a batch is answered whole or not at all
    c.metrics->request_finished("rejected");
    return send_json(w, 503, error_json(503, e.what(), ""), extra);
  } catch (const InputError& e) {
    for (auto& r : requests) r->cancel();
    return refuse(c, w, 400, e.what(), "", extra);
  }
  std::unique_ptr<ResponseAssembler> a;
  if (endpoint == ApiEndpoint::Completions) {
    a = std::make_unique<CompletionAssembler>(api, *c.tokenizer, c.model.name, make_response_id("cmpl-"), unix_time());
  } else {
    a = std::make_unique<ChatAssembler>(api, *c.tokenizer, c.model.name, make_response_id("chatcmpl-"), unix_time());
  }
  if (api.stream) {
    http::Headers h = extra;
    h.add("Cache-Control", "no-cache");
    if (!w.begin_stream(200, "text/event-stream", h)) {
      for (auto& r : requests) r->cancel();
      return w.abort();
    }
    drive(requests, *a, w, true);
    if (w.finished()) return;  // abandoned: the client is gone
    for (const std::string& event : a->finish()) {
      if (!w.write(event)) return w.abort();
    }
    return w.end();
  }
  drive(requests, *a, w, false);
  if (w.finished()) return;
  if (a->error_status() != 0) {
    return send_json(w, a->error_status(), error_json(a->error_status(), a->error_message(), a->error_param()), extra);
  }
  send_json(w, 200, a->body(), extra);
}

/// A path segment with its %XX escapes decoded (RFC 3986 §2.1): clients escape the "/"
/// of a name like "allenai/OLMo-2-1B" as %2F. A "%" not followed by two hex digits stays.
std::string percent_decoded(const std::string& s) {
  auto hex = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

/// A route whose body is answered by a pure function: 200 with its JSON, or its
/// ApiError's status naming the field.
template <class F>
void answer(http::ResponseWriter& w, F&& make) {
  try {
    send_json(w, 200, make(), {});
  } catch (const ApiError& e) {
    send_json(w, e.status(), error_json(e.status(), e.what(), e.param()), {});
  } catch (const InputError& e) {
    send_json(w, 400, error_json(400, e.what(), ""), {});
  }
}
}  // namespace

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
    if ((req.path == "/v1/completions" || req.path == "/v1/chat/completions") && r.status >= 400) {
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
    answer(w, [&] { return models_list_json(c->model, c->created); });
  });
  server.route_prefix("GET", "/v1/models/", [c](const http::Request& req, http::ResponseWriter& w) {
    answer(w, [&] { return model_response(percent_decoded(req.path_suffix), c->model, c->created); });
  });
  server.route("POST", "/v1/completions", [c](const http::Request& req, http::ResponseWriter& w) {
    generate(*c, req, w, ApiEndpoint::Completions);
  });
  server.route("POST", "/v1/chat/completions", [c](const http::Request& req, http::ResponseWriter& w) {
    generate(*c, req, w, ApiEndpoint::Chat);
  });
  server.route("POST", "/tokenize", [c](const http::Request& req, http::ResponseWriter& w) {
    answer(w, [&] { return tokenize_response(req.body, c->model, *c->tokenizer, chat_renderer(*c)); });
  });
  server.route("POST", "/detokenize", [c](const http::Request& req, http::ResponseWriter& w) {
    answer(w, [&] { return detokenize_response(req.body, c->model, *c->tokenizer); });
  });
}

}  // namespace olmo2
