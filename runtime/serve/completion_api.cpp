#include "runtime/serve/completion_api.h"

#include <cmath>
#include <cstdint>

#include "runtime/serve/json_body.h"

namespace olmo2 {

namespace {
using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, param, message);
}

/// A value for an error message: a scalar as JSON (long strings cut), a container by
/// its kind only. Never json::dump of a container: it recurses, and a deeply nested
/// value would overflow the HTTP thread's stack.
std::string brief(const json& v) {
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  if (v.is_string()) {
    const std::string& t = v.get_ref<const std::string&>();
    return t.size() <= 40 ? json(t).dump(-1, ' ', false, json::error_handler_t::replace)
                          : json(t.substr(0, 40)).dump(-1, ' ', false, json::error_handler_t::replace) + "…";
  }
  return v.dump();  // a number, a boolean or null
}

const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

int64_t integer(const json& body, const char* name, int64_t fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    bad(name, std::string(name) + " is too large: " + brief(*v));
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) return static_cast<int64_t>(d);
  }
  bad(name, std::string(name) + " must be an integer, got " + brief(*v));
}

double number(const json& body, const char* name, double fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) bad(name, std::string(name) + " must be a number, got " + brief(*v));
  return v->get<double>();
}

bool boolean(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(name, std::string(name) + " must be true or false, got " + brief(*v));
  return v->get<bool>();
}
}  // namespace

CompletionParams parse_completion_request(const std::string& text, const ServedModel& model,
                                          const Tokenizer& tokenizer, uint64_t fallback_seed) {
  const json body = parse_json_body(text);  // ApiError naming the field of a number like 1e999
  if (!body.is_object()) bad("", "the request body must be a JSON object, got " + std::string(body.type_name()));
  CompletionParams p;
  if (const json* m = field(body, "model")) {
    if (!m->is_string() || m->get<std::string>() != model.name) {
      bad("model", "unknown model " + brief(*m) + ": this server serves \"" + model.name + "\"");
    }
  }
  // prompt
  const json* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "prompt is required (a string or a list of token ids)");
  if (prompt->is_string()) {
    p.prompt = tokenizer.encode(prompt->get<std::string>());
    // A tokenizer wider than the model (a mismatched model directory) must cost this
    // request a 400, not the server.
    for (size_t i = 0; i < p.prompt.size(); ++i) {
      if (p.prompt[i] >= model.vocab_size) {
        bad("prompt", "prompt: the tokenizer gives token id " + std::to_string(p.prompt[i]) + " at position " +
                          std::to_string(i) + ", outside the model's vocabulary [0, " +
                          std::to_string(model.vocab_size) + "): the tokenizer does not fit this model");
      }
    }
  } else if (prompt->is_array()) {
    for (size_t i = 0; i < prompt->size(); ++i) {
      const json& e = (*prompt)[i];
      if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
        bad("prompt", e.is_string() || e.is_array()
                          ? "prompt: a list of prompts is not supported (one prompt per request)"
                          : "prompt: element " + std::to_string(i) + " is not a token id: " + brief(e));
      }
      const int64_t id = e.get<int64_t>();
      if (id < 0 || id >= model.vocab_size) {
        bad("prompt", "prompt: token id " + std::to_string(id) + " at position " + std::to_string(i) +
                          " is outside the vocabulary [0, " + std::to_string(model.vocab_size) + ")");
      }
      p.prompt.push_back(static_cast<int32_t>(id));
    }
  } else {
    bad("prompt", std::string("prompt must be a string or a list of token ids, got a ") + prompt->type_name());
  }
  if (p.prompt.empty()) bad("prompt", "prompt is empty (no BOS token is added, so there is nothing to condition on)");
  // lengths
  p.max_tokens = integer(body, "max_tokens", 16);
  if (p.max_tokens < 1) bad("max_tokens", "max_tokens must be at least 1, got " + std::to_string(p.max_tokens));
  const int64_t plen = static_cast<int64_t>(p.prompt.size());
  if (plen >= model.context_length) {
    bad("prompt", "the prompt has " + std::to_string(plen) + " tokens and the context length is " +
                      std::to_string(model.context_length) + ": no room for even one generated token");
  }
  if (p.max_tokens > model.context_length - plen) {  // not plen + max_tokens: it may overflow
    bad("max_tokens", "prompt of " + std::to_string(plen) + " tokens + max_tokens " + std::to_string(p.max_tokens) +
                          " exceeds the context length " + std::to_string(model.context_length) +
                          " (at most " + std::to_string(model.context_length - plen) + " for this prompt)");
  }
  if (p.max_tokens > model.cache_tokens - plen) {
    bad("max_tokens", "prompt of " + std::to_string(plen) + " tokens + max_tokens " + std::to_string(p.max_tokens) +
                          " exceeds the KV cache of " + std::to_string(model.cache_tokens) +
                          " positions (--kv-cache-memory)");
  }
  // sampling
  p.sampling.temperature = number(body, "temperature", 1.0);
  if (!(p.sampling.temperature >= 0) || !std::isfinite(p.sampling.temperature)) {
    bad("temperature", "temperature must be a finite number ≥ 0 (0: greedy), got " + brief(*field(body, "temperature")));
  }
  p.sampling.top_p = number(body, "top_p", 1.0);
  if (!(p.sampling.top_p > 0 && p.sampling.top_p <= 1)) {
    bad("top_p", "top_p must be in (0, 1], got " + brief(*field(body, "top_p")));
  }
  p.sampling.top_k = integer(body, "top_k", 0);
  if (p.sampling.top_k == -1) p.sampling.top_k = 0;
  if (p.sampling.top_k < 0) bad("top_k", "top_k must be ≥ 0 (or −1 for no limit), got " + std::to_string(p.sampling.top_k));
  if (const json* s = field(body, "seed")) {
    if (s->is_number_unsigned()) p.sampling.seed = s->get<uint64_t>();
    else p.sampling.seed = static_cast<uint64_t>(integer(body, "seed", 0));
  } else {
    p.sampling.seed = fallback_seed;
  }
  // stop strings
  if (const json* s = field(body, "stop")) {
    if (s->is_string()) {
      p.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= 16) {
      for (const json& e : *s) {
        if (!e.is_string()) bad("stop", "stop must be a string or a list of strings, got an element " + brief(e));
        p.stop.push_back(e.get<std::string>());
      }
    } else {
      bad("stop", "stop must be a string or a list of at most 16 strings");
    }
    for (const std::string& x : p.stop) {
      if (x.empty()) bad("stop", "stop strings must not be empty");
    }
  }
  p.stream = boolean(body, "stream", false);
  p.ignore_eos = boolean(body, "ignore_eos", false);
  if (field(body, "logprobs")) {
    p.logprobs = static_cast<int32_t>(std::clamp<int64_t>(integer(body, "logprobs", 0), -1, 100));
    if (p.logprobs < 0 || p.logprobs > 20) bad("logprobs", "logprobs must be between 0 and 20");
    p.want_logprobs = true;
  }
  if (integer(body, "n", 1) != 1) bad("n", "n must be 1: one completion per request");
  if (integer(body, "best_of", 1) != 1) bad("best_of", "best_of must be 1");
  if (boolean(body, "echo", false)) bad("echo", "echo is not supported");
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    if (number(body, penalty, 0) != 0) bad(penalty, std::string(penalty) + " is not supported (must be 0)");
  }
  return p;
}

json error_json(int status, const std::string& message, const std::string& param) {
  const char* type = status == 401 ? "authentication_error"
                     : status == 503 ? "service_unavailable"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)},
                     {"code", status}}}};
}

json logprobs_json(const std::vector<SelectedToken>& tokens, const Tokenizer& tokenizer, int64_t offset,
                   int32_t top_n) {
  json j = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
            {"text_offset", json::array()}};
  auto text_of = [&](int32_t id) {  // ids past the tokenizer's vocabulary (padding rows) have no text
    return id < tokenizer.vocab_size() ? tokenizer.decode(std::span<const int32_t>(&id, 1)) : std::string();
  };
  for (const SelectedToken& t : tokens) {
    const std::string s = text_of(t.id);
    j["tokens"].push_back(s);
    j["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (size_t k = 0; k < t.top.size() && static_cast<int32_t>(k) < top_n; ++k) top[text_of(t.top[k].id)] = t.top[k].logit;
    j["top_logprobs"].push_back(top);
    j["text_offset"].push_back(offset);
    for (const char ch : s) offset += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;  // characters, not bytes
  }
  return j;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace olmo2
