#include "runtime/serve/api/completion_request.h"

#include <algorithm>

#include "runtime/generation/request_rules.h"
#include "runtime/serve/api/api_error.h"
#include "runtime/serve/api/json_fields.h"
#include "runtime/serve/api/sampling_fields.h"
#include "runtime/serve/api/structured_fields.h"
#include "runtime/serve/api/token_text.h"
#include "runtime/serve/api/trace_fields.h"

namespace olmo2 {

using nlohmann::json;

namespace {

struct Prompt {
  std::vector<int32_t> ids;
  std::string text;
  bool from_text = false;
};

/// A list of token ids as given (range checks are check_lengths').
std::vector<int32_t> id_list(const Fields& f, const json& list, const std::string& where) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)) ||
        e.get<int64_t>() < INT32_MIN || e.get<int64_t>() > INT32_MAX) {
      f.fail("prompt", where + ": element " + std::to_string(i) + " is not a token id: " + brief(e));
    }
    ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return ids;
}

std::vector<Prompt> read_prompts(Fields& f, const Tokenizer& tokenizer) {
  const json* prompt = f.get("prompt");
  if (!prompt) f.fail("prompt", "prompt is required (a string, a list of token ids, or a list of either)");
  std::vector<Prompt> out;
  const auto text = [&](const json& s) {
    Prompt p;
    p.text = s.get<std::string>();
    p.ids = tokenizer.encode(p.text);
    p.from_text = true;
    return p;
  };
  const auto ids = [&](const json& list, const std::string& where) {
    Prompt p;
    p.ids = id_list(f, list, where);
    p.text = decode_known(tokenizer, p.ids, false);
    return p;
  };
  if (prompt->is_string()) {
    out.push_back(text(*prompt));
  } else if (prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    const bool strings = (*prompt)[0].is_string();
    for (size_t i = 0; i < prompt->size(); ++i) {
      const json& e = (*prompt)[i];
      const std::string where = "prompt[" + std::to_string(i) + "]";
      if (strings ? !e.is_string() : !e.is_array()) {
        f.fail("prompt", where + " must be " + (strings ? "a string" : "a list of token ids") + " like prompt[0], got " +
                             brief(e));
      }
      out.push_back(strings ? text(e) : ids(e, where));
    }
  } else if (prompt->is_array()) {
    out.push_back(ids(*prompt, "prompt"));
  } else {
    f.fail("prompt", std::string("prompt must be a string or a list of token ids (or a list of either, one "
                                 "prompt each), got a ") +
                         prompt->type_name());
  }
  return out;
}

}  // namespace

ApiRequest parse_completions(const std::string& text, const ServedModel& served, const Tokenizer& tokenizer,
                             uint64_t fallback_seed) {
  const json body = parse_body(text);
  Fields f(body);
  ApiRequest r;
  r.endpoint = ApiEndpoint::Completions;
  check_model_field(f, served);
  const std::vector<Prompt> prompts = read_prompts(f, tokenizer);
  if (const RuleVerdict v = batch_rule(static_cast<int64_t>(prompts.size()), served.max_prompts)) {
    f.fail(v->field, v->reason);
  }
  const int64_t most = std::max<int64_t>(served.max_choices, 1);
  r.n = static_cast<int32_t>(f.integer("n", 1, 1, most));
  r.best_of = static_cast<int32_t>(f.integer("best_of", r.n, 1, most));
  if (r.best_of < r.n) {
    f.fail("best_of", "best_of " + std::to_string(r.best_of) + " is less than n " + std::to_string(r.n) +
                          ": best_of completions are generated and the n best returned");
  }
  read_stream_fields(f, r);
  if (r.stream && r.best_of > r.n) {
    f.fail("best_of", "best_of > n cannot be streamed: the best choices are known only when all have finished");
  }
  r.echo = f.boolean("echo", false);
  CompletionParams base;
  // Left out: generation_config.json's max_new_tokens (cut to each prompt's room below), else 16.
  const bool default_max = !f.get("max_tokens") && served.defaults.max_new_tokens;
  base.max_tokens = f.integer("max_tokens", served.defaults.max_new_tokens.value_or(16), 0, INT64_MAX);
  if (const RuleVerdict v = max_tokens_rule(base.max_tokens, r.echo, PromptNames{})) f.fail(v->field, v->reason);
  if (f.get("logprobs")) {
    r.want_logprobs = true;
    r.top_logprobs = static_cast<int32_t>(f.integer("logprobs", 0, 0, 20));
  }
  r.return_tokens_as_token_ids = f.boolean("return_tokens_as_token_ids", false);
  read_generation_fields(f, served, fallback_seed, base);
  const std::shared_ptr<const trace::TraceSpec> trace = read_trace_fields(f, served, r.n, r.best_of);
  int64_t trace_bytes = 0;  // the worst case of every prompt's reads, bounded together
  refuse_tool_fields(f);
  read_structured_fields(f, text, served, base);
  read_unimplemented_fields(f);
  f.refuse_unread();
  base.stream = r.stream;
  base.logprobs = r.top_logprobs;
  base.want_logprobs = r.want_logprobs;
  base.prompt_logprobs = r.echo && r.want_logprobs;
  base.choices = std::max(r.n, r.best_of);
  r.skip_special_tokens = base.skip_special_tokens;
  const bool seeded = f.get("seed") != nullptr;
  for (size_t i = 0; i < prompts.size(); ++i) {
    CompletionParams p = base;
    p.prompt = prompts[i].ids;
    if (!seeded) p.sampling.seed = choice_seed(fallback_seed, static_cast<int32_t>(i));
    PromptLabel label;
    label.name = prompts.size() == 1 ? "prompt" : "prompt " + std::to_string(i);
    label.from_text = prompts[i].from_text;
    if (default_max) p.max_tokens = std::min(p.max_tokens, std::max<int64_t>(max_tokens_room(p, served), 1));
    check_lengths(p, served, label, "max_tokens");
    p.trace = trace_for_prompt(trace, p, served, label.name, trace_bytes);
    r.prompts.push_back(std::move(p));
    r.prompt_texts.push_back(prompts[i].text);
  }
  r.activation_bytes = trace_bytes;
  return r;
}

}  // namespace olmo2
