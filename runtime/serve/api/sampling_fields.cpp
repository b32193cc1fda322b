#include "runtime/serve/api/sampling_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/generation/request_rules.h"
#include "runtime/serve/api/api_error.h"

namespace olmo2 {

using nlohmann::json;

namespace {
constexpr double kAny = std::numeric_limits<double>::max();

/// A broken rule of the rule book (runtime/generation/request_rules.h) as a 400 naming
/// its field.
void check(const Fields& f, const RuleVerdict& v) {
  if (v) f.fail(v->field, v->reason);
}

/// A token id given by the client: a JSON integer, in [0, vocab) (token_id_rule).
int32_t token_id(const Fields& f, const std::string& name, const json& v, const std::string& where, int64_t vocab) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    f.fail(name, where + " is not a token id: " + brief(v));
  }
  const int64_t id = v.get<int64_t>();
  check(f, token_id_rule(name, where, id, vocab));
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
    if (!value.is_number()) f.fail("logit_bias", where + " must be a number in [-100, 100], got " + brief(value));
    // Ids past int32 are outside every vocabulary: clamp so the rule names them as such.
    adjust.logit_bias.emplace_back(static_cast<int32_t>(std::min<int64_t>(id, INT32_MAX)), value.get<float>());
    check(f, logit_bias_rule({adjust.logit_bias.back()}, served.vocab_size));
  }
  std::sort(adjust.logit_bias.begin(), adjust.logit_bias.end());
  check(f, logit_bias_rule(adjust.logit_bias, served.vocab_size));
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
  const GenerationDefaults& d = served.defaults;  // generation_config.json's, else the API's own
  s.temperature = f.number("temperature", d.temperature.value_or(1.0), -kAny, kAny);
  check(f, temperature_rule(s.temperature));
  s.top_p = f.number("top_p", d.top_p.value_or(1.0), -kAny, kAny);
  check(f, top_p_rule(s.top_p));
  s.top_k = f.integer("top_k", d.top_k.value_or(0), INT64_MIN, INT64_MAX);
  if (s.top_k == -1) s.top_k = 0;  // vLLM's "no limit"
  check(f, top_k_rule(s.top_k));
  s.min_p = f.number("min_p", d.min_p.value_or(0.0), -kAny, kAny);
  check(f, min_p_rule(s.min_p));
  if (const json* seed = f.get("seed")) {
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(f.integer("seed", 0, INT64_MIN, INT64_MAX));
  } else {
    s.seed = fallback_seed;
  }
  read_stop(f, served, p);
  p.adjust.presence_penalty = f.number("presence_penalty", 0.0, -kAny, kAny);
  check(f, presence_penalty_rule(p.adjust.presence_penalty));
  p.adjust.frequency_penalty = f.number("frequency_penalty", 0.0, -kAny, kAny);
  check(f, frequency_penalty_rule(p.adjust.frequency_penalty));
  p.adjust.repetition_penalty = f.number("repetition_penalty", d.repetition_penalty.value_or(1.0), -kAny, kAny);
  check(f, repetition_penalty_rule(p.adjust.repetition_penalty));
  read_logit_bias(f, served, p.adjust);
  p.min_tokens = f.integer("min_tokens", 0, INT64_MIN, INT64_MAX);  // min_tokens_rule: check_lengths
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

void refuse_tool_fields(Fields& f) {
  const std::string why = "tool calls are a chat feature (/v1/chat/completions)";
  f.refuse("tools", why, {json::array()});
  f.refuse("tool_choice", why, {"none"});
  f.ignore("parallel_tool_calls");  // only means something with tools, which are refused
}

void read_unimplemented_fields(Fields& f) {
  const std::string tools = "function calling";
  const std::string beam = "beam search is not implemented";
  f.refuse("suffix", "the model has no fill-in-the-middle mode here", {""});
  f.refuse("functions", tools + " in its deprecated form: use tools and tool_choice", {json::array()});
  f.refuse("function_call", tools + " in its deprecated form: use tools and tool_choice", {"none"});
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
  const PromptNames names{label.param, label.name, label.from_text, max_tokens_param};
  const int64_t plen = static_cast<int64_t>(p.prompt.size());
  for (const RuleVerdict& v : {prompt_rule(p.prompt, served.vocab_size, names),
                               context_rule(plen, p.max_tokens, served.context_length, names),
                               kv_cache_rule(plen, p.max_tokens, p.choices, served.cache_tokens, names),
                               min_tokens_rule(p.min_tokens, p.max_tokens, names)}) {
    if (v) throw ApiError(400, v->field, v->reason);
  }
}

int64_t max_tokens_room(const CompletionParams& p, const ServedModel& served) {
  const int64_t plen = static_cast<int64_t>(p.prompt.size());
  if (plen > served.cache_tokens) return 0;
  return std::min(served.context_length - plen, (served.cache_tokens - plen) / std::max<int64_t>(p.choices, 1));
}

}  // namespace olmo2
