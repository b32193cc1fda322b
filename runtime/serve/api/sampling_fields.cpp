#include "runtime/serve/api/sampling_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/serve/api/api_error.h"

namespace olmo2 {

using nlohmann::json;

namespace {
constexpr double kAny = std::numeric_limits<double>::max();

/// A token id given by the client: an integer in [0, vocab).
int32_t token_id(const Fields& f, const std::string& name, const json& v, const std::string& where, int64_t vocab) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    f.fail(name, where + " is not a token id: " + brief(v));
  }
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id >= vocab) {
    f.fail(name, where + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab) +
                     ")");
  }
  return static_cast<int32_t>(id);
}

void read_logit_bias(Fields& f, const ServedModel& served, LogitsAdjustments& adjust) {
  const json* bias = f.get("logit_bias");
  if (!bias) return;
  if (!bias->is_object()) {
    f.fail("logit_bias", "logit_bias must be an object of token ids (as strings) to numbers in [-100, 100], got " +
                             brief(*bias));
  }
  for (const auto& [key, value] : bias->items()) {
    const std::string where = "logit_bias[" + brief(json(key)) + "]";
    const bool digits = !key.empty() && key.size() <= 12 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) f.fail("logit_bias", where + ": the key must be a token id in decimal digits");
    const int64_t id = std::stoll(key);
    if (id >= served.vocab_size) {
      f.fail("logit_bias", where + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                               std::to_string(served.vocab_size) + ")");
    }
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100)) {
      f.fail("logit_bias", where + " must be a number in [-100, 100], got " + brief(value));
    }
    adjust.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  std::sort(adjust.logit_bias.begin(), adjust.logit_bias.end());
  for (size_t i = 1; i < adjust.logit_bias.size(); ++i) {
    if (adjust.logit_bias[i].first == adjust.logit_bias[i - 1].first) {
      f.fail("logit_bias", "logit_bias names token id " + std::to_string(adjust.logit_bias[i].first) +
                               " twice (keys such as \"7\" and \"07\" are the same id)");
    }
  }
}

void read_stop(Fields& f, const ServedModel& served, CompletionParams& p) {
  if (const json* s = f.get("stop")) {
    if (s->is_string()) {
      p.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= 16) {
      for (const json& e : *s) {
        if (!e.is_string()) f.fail("stop", "stop must be a string or a list of strings, got an element " + brief(e));
        p.stop.push_back(e.get<std::string>());
      }
    } else {
      f.fail("stop", "stop must be a string or a list of at most 16 strings");
    }
    for (const std::string& x : p.stop) {
      if (x.empty()) f.fail("stop", "stop strings must not be empty");
    }
  }
  if (const json* ids = f.get("stop_token_ids")) {
    if (!ids->is_array()) f.fail("stop_token_ids", "stop_token_ids must be a list of token ids, got " + brief(*ids));
    for (size_t i = 0; i < ids->size(); ++i) {
      p.stop_token_ids.push_back(
          token_id(f, "stop_token_ids", (*ids)[i], "stop_token_ids[" + std::to_string(i) + "]", served.vocab_size));
    }
    std::sort(p.stop_token_ids.begin(), p.stop_token_ids.end());
    p.stop_token_ids.erase(std::unique(p.stop_token_ids.begin(), p.stop_token_ids.end()), p.stop_token_ids.end());
  }
}
}  // namespace

void check_model_field(Fields& f, const ServedModel& served) {
  if (const json* m = f.get("model")) {
    if (!m->is_string() || m->get<std::string>() != served.name) {
      f.fail("model", "unknown model " + brief(*m) + ": this server serves \"" + served.name + "\"");
    }
  }
}

void read_generation_fields(Fields& f, const ServedModel& served, uint64_t fallback_seed, CompletionParams& p) {
  SamplingParams& s = p.sampling;
  s.temperature = f.number("temperature", 1.0, -kAny, kAny);
  if (s.temperature < 0) {
    f.fail("temperature", "temperature must be a finite number ≥ 0 (0: greedy), got " + brief(*f.get("temperature")));
  }
  s.top_p = f.number("top_p", 1.0, -kAny, kAny);
  if (!(s.top_p > 0 && s.top_p <= 1)) f.fail("top_p", "top_p must be in (0, 1], got " + brief(*f.get("top_p")));
  s.top_k = f.integer("top_k", 0, INT64_MIN, INT64_MAX);
  if (s.top_k == -1) s.top_k = 0;
  if (s.top_k < 0) f.fail("top_k", "top_k must be ≥ 0 (or −1 for no limit), got " + std::to_string(s.top_k));
  s.min_p = f.number("min_p", 0.0, 0.0, 1.0);
  if (const json* seed = f.get("seed")) {
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(f.integer("seed", 0, INT64_MIN, INT64_MAX));
  } else {
    s.seed = fallback_seed;
  }
  read_stop(f, served, p);
  p.adjust.presence_penalty = f.number("presence_penalty", 0.0, -2.0, 2.0);
  p.adjust.frequency_penalty = f.number("frequency_penalty", 0.0, -2.0, 2.0);
  p.adjust.repetition_penalty = f.number("repetition_penalty", 1.0, -kAny, kAny);
  if (!(p.adjust.repetition_penalty > 0)) {
    f.fail("repetition_penalty", "repetition_penalty must be > 0 (1: none), got " + brief(*f.get("repetition_penalty")));
  }
  read_logit_bias(f, served, p.adjust);
  p.min_tokens = f.integer("min_tokens", 0, 0, INT64_MAX);
  p.include_stop_str_in_output = f.boolean("include_stop_str_in_output", false);
  p.skip_special_tokens = f.boolean("skip_special_tokens", true);
  p.ignore_eos = f.boolean("ignore_eos", false);
}

void read_stream_fields(Fields& f, ApiRequest& r) {
  r.stream = f.boolean("stream", false);
  if (const json* o = f.get("stream_options")) {
    if (!r.stream) f.fail("stream_options", "stream_options is only allowed with \"stream\": true");
    if (!o->is_object()) f.fail("stream_options", "stream_options must be an object, got " + brief(*o));
    Fields so(*o, "stream_options");
    r.include_usage = so.boolean("include_usage", false);
    so.refuse("continuous_usage_stats", "usage is sent once, in the final chunk", {false});
    so.refuse_unread();
  }
}

void read_unimplemented_fields(Fields& f) {
  const std::string tools = "tool and function calling is not implemented";
  const std::string guided = "guided (structured) decoding is not implemented";
  const std::string beam = "beam search is not implemented";
  f.refuse("suffix", "the model has no fill-in-the-middle mode here", {""});
  f.refuse("tools", tools, {json::array()});
  f.refuse("tool_choice", tools, {"none"});
  f.refuse("functions", tools, {json::array()});
  f.refuse("function_call", tools, {"none"});
  f.ignore("parallel_tool_calls");  // only means something with tools, which are refused
  f.refuse("response_format", "only {\"type\": \"text\"} (plain text) is produced", {json{{"type", "text"}}});
  for (const char* g : {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend",
                        "guided_whitespace_pattern", "structured_outputs"}) {
    f.refuse(g, guided);
  }
  f.refuse("use_beam_search", beam, {false});
  f.refuse("length_penalty", beam, {1});
  f.refuse("early_stopping", beam, {false});
  f.refuse("prompt_logprobs",
           "use \"echo\": true with \"logprobs\": the prompt's tokens then come first in the logprobs");
  f.refuse("truncate_prompt_tokens", "a prompt is never cut: a long prompt is refused with the numbers");
  f.refuse("allowed_token_ids", "use logit_bias instead");
  f.refuse("bad_words", "use logit_bias instead", {json::array()});
  f.refuse("logits_processors", "custom logits processors are not implemented");
  f.refuse("spaces_between_special_tokens", "special tokens are decoded as they are", {true});
  f.refuse("continue_final_message", "the last message is never continued (use echo with add_generation_prompt false)",
           {false});
  f.refuse("chat_template", "the server's template is used (olmo2 serve --chat-template FILE)");
  f.refuse("chat_template_kwargs", "the template gets no extra arguments", {json::object()});
  f.refuse("documents", "the template gets no documents");
  f.refuse("audio", "audio output is not implemented");
  f.refuse("modalities", "only text is produced", {json::array({"text"})});
  f.refuse("prediction", "predicted outputs are not implemented");
  f.refuse("reasoning_effort", "the model has no reasoning mode");
  f.refuse("web_search_options", "web search is not implemented");
  f.refuse("kv_transfer_params", "KV transfer is not implemented");
  for (const char* no_effect : {"user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key",
                                "request_id", "priority", "cache_salt"}) {
    f.ignore(no_effect);
  }
  f.boolean("add_special_tokens", false);
}

void check_lengths(const CompletionParams& p, const ServedModel& served, const PromptLabel& label,
                   const std::string& max_tokens_param) {
  const auto bad = [&](const std::string& param, const std::string& message) { throw ApiError(400, param, message); };
  for (size_t i = 0; i < p.prompt.size(); ++i) {
    if (p.prompt[i] >= 0 && p.prompt[i] < served.vocab_size) continue;
    if (label.from_text) {
      bad(label.param, label.name + ": the tokenizer gives token id " + std::to_string(p.prompt[i]) + " at position " +
                           std::to_string(i) + ", outside the model's vocabulary [0, " +
                           std::to_string(served.vocab_size) + "): the tokenizer does not fit this model");
    }
    bad(label.param, label.name + ": token id " + std::to_string(p.prompt[i]) + " at position " + std::to_string(i) +
                         " is outside the vocabulary [0, " + std::to_string(served.vocab_size) + ")");
  }
  if (p.prompt.empty()) {
    bad(label.param, label.name + " is empty (no BOS token is added, so there is nothing to condition on)");
  }
  const int64_t plen = static_cast<int64_t>(p.prompt.size());
  const int64_t ctx = served.context_length;
  if (p.max_tokens == 0 ? plen > ctx : plen >= ctx) {
    bad(label.param, label.name + " has " + std::to_string(plen) + " tokens and the context length is " +
                         std::to_string(ctx) + (p.max_tokens == 0 ? "" : ": no room for even one generated token"));
  }
  if (p.max_tokens > ctx - plen) {  // not plen + max_tokens: it may overflow
    bad(max_tokens_param, label.name + " of " + std::to_string(plen) + " tokens + " + max_tokens_param + " " +
                              std::to_string(p.max_tokens) + " exceeds the context length " + std::to_string(ctx) +
                              " (at most " + std::to_string(ctx - plen) + " for this prompt)");
  }
  const int64_t choices = std::max<int64_t>(p.choices, 1);
  if (plen > served.cache_tokens || p.max_tokens > (served.cache_tokens - plen) / choices) {
    bad(max_tokens_param,
        label.name + " of " + std::to_string(plen) + " tokens + " + max_tokens_param + " " +
            std::to_string(p.max_tokens) + (choices > 1 ? " × " + std::to_string(choices) + " choices" : "") +
            " exceeds the KV cache of " + std::to_string(served.cache_tokens) + " positions (--kv-cache-memory)");
  }
  if (p.min_tokens > p.max_tokens) {
    bad("min_tokens", "min_tokens " + std::to_string(p.min_tokens) + " is more than " + max_tokens_param + " " +
                          std::to_string(p.max_tokens));
  }
}

int64_t max_tokens_room(const CompletionParams& p, const ServedModel& served) {
  const int64_t plen = static_cast<int64_t>(p.prompt.size());
  if (plen > served.cache_tokens) return 0;
  return std::min(served.context_length - plen, (served.cache_tokens - plen) / std::max<int64_t>(p.choices, 1));
}

}  // namespace olmo2
