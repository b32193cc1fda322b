#include "runtime/generation/request_rules.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace olmo2 {

namespace {
/// The shortest decimal that reads back as `v` (1.5, -0.25, 1e+300, nan).
std::string shown(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

RuleVerdict broken(std::string field, std::string reason) { return FieldProblem{std::move(field), std::move(reason)}; }

RuleVerdict penalty_rule(const char* field, double v) {
  if (v >= -2 && v <= 2) return std::nullopt;
  return broken(field, std::string(field) + " must be in [-2, 2], got " + shown(v));
}
}  // namespace

void throw_if_broken(const RuleVerdict& v) {
  if (v) OLMO2_THROW(InputError, v->reason);
}

RuleVerdict temperature_rule(double t) {
  if (t >= 0 && std::isfinite(t)) return std::nullopt;
  return broken("temperature", "temperature must be a finite number ≥ 0 (0: greedy), got " + shown(t));
}

RuleVerdict top_p_rule(double p) {
  if (p > 0 && p <= 1) return std::nullopt;
  return broken("top_p", "top_p must be in (0, 1], got " + shown(p));
}

RuleVerdict top_k_rule(int64_t k) {
  if (k >= 0) return std::nullopt;
  return broken("top_k", "top_k must be ≥ 0 (0, or −1 in a request: no limit), got " + std::to_string(k));
}

RuleVerdict min_p_rule(double p) {
  if (p >= 0 && p <= 1) return std::nullopt;
  return broken("min_p", "min_p must be in [0, 1], got " + shown(p));
}

RuleVerdict sampling_rules(const SamplingParams& p) {
  for (RuleVerdict v : {temperature_rule(p.temperature), top_p_rule(p.top_p), top_k_rule(p.top_k), min_p_rule(p.min_p)}) {
    if (v) return v;
  }
  return std::nullopt;
}

RuleVerdict presence_penalty_rule(double v) { return penalty_rule("presence_penalty", v); }
RuleVerdict frequency_penalty_rule(double v) { return penalty_rule("frequency_penalty", v); }

RuleVerdict repetition_penalty_rule(double v) {
  if (v > 0 && std::isfinite(v)) return std::nullopt;
  return broken("repetition_penalty", "repetition_penalty must be a finite number > 0 (1: none), got " + shown(v));
}

RuleVerdict logit_bias_rule(const std::vector<std::pair<int32_t, float>>& bias, int64_t vocab) {
  for (size_t i = 0; i < bias.size(); ++i) {
    const auto [id, value] = bias[i];
    if (id < 0 || id >= vocab) {
      return broken("logit_bias", "logit_bias: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                      std::to_string(vocab) + ")");
    }
    if (!(value >= -100 && value <= 100)) {
      return broken("logit_bias", "logit_bias: the bias of token id " + std::to_string(id) +
                                      " must be a number in [-100, 100], got " + shown(value));
    }
    if (i > 0 && bias[i - 1].first == id) {
      return broken("logit_bias", "logit_bias names token id " + std::to_string(id) +
                                      " twice (keys such as \"7\" and \"07\" are the same id)");
    }
    if (i > 0 && bias[i - 1].first > id) {
      return broken("logit_bias", "logit_bias token ids must be ascending: " + std::to_string(bias[i - 1].first) +
                                      " then " + std::to_string(id));
    }
  }
  return std::nullopt;
}

RuleVerdict adjustment_rules(const LogitsAdjustments& a, int64_t vocab) {
  for (RuleVerdict v : {presence_penalty_rule(a.presence_penalty), frequency_penalty_rule(a.frequency_penalty),
                        repetition_penalty_rule(a.repetition_penalty), logit_bias_rule(a.logit_bias, vocab)}) {
    if (v) return v;
  }
  return std::nullopt;
}

RuleVerdict token_id_rule(const std::string& field, const std::string& where, int64_t id, int64_t vocab) {
  if (id >= 0 && id < vocab) return std::nullopt;
  return broken(field, where + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(vocab) + ")");
}

RuleVerdict prompt_rule(const std::vector<int32_t>& prompt, int64_t vocab, const PromptNames& n) {
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] >= 0 && prompt[i] < vocab) continue;
    if (n.from_text) {
      return broken(n.prompt_field, n.prompt_name + ": the tokenizer gives token id " + std::to_string(prompt[i]) +
                                        " at position " + std::to_string(i) + ", outside the model's vocabulary [0, " +
                                        std::to_string(vocab) + "): the tokenizer does not fit this model");
    }
    return broken(n.prompt_field, n.prompt_name + ": token id " + std::to_string(prompt[i]) + " at position " +
                                      std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab) +
                                      ")");
  }
  if (prompt.empty()) {
    return broken(n.prompt_field,
                  n.prompt_name + " is empty (no BOS token is added, so there is nothing to condition on)");
  }
  return std::nullopt;
}

RuleVerdict max_tokens_rule(int64_t max_tokens, bool zero_allowed, const PromptNames& n) {
  if (max_tokens >= 1 || (zero_allowed && max_tokens == 0)) return std::nullopt;
  return broken(n.max_tokens_field, n.max_tokens_field + " must be at least 1" +
                                        (zero_allowed ? " (0 only with echo: the prompt is scored)" : "") + ", got " +
                                        std::to_string(max_tokens));
}

RuleVerdict context_rule(int64_t plen, int64_t max_tokens, int64_t ctx, const PromptNames& n) {
  if (max_tokens == 0 ? plen > ctx : plen >= ctx) {
    return broken(n.prompt_field, n.prompt_name + " has " + std::to_string(plen) + " tokens and the context length is " +
                                      std::to_string(ctx) +
                                      (max_tokens == 0 ? "" : ": no room for even one generated token"));
  }
  if (max_tokens > ctx - plen) {  // not plen + max_tokens: it may overflow
    return broken(n.max_tokens_field, n.prompt_name + " of " + std::to_string(plen) + " tokens + " +
                                          n.max_tokens_field + " " + std::to_string(max_tokens) +
                                          " exceeds the context length " + std::to_string(ctx) + " (at most " +
                                          std::to_string(ctx - plen) + " for this prompt)");
  }
  return std::nullopt;
}

RuleVerdict kv_cache_rule(int64_t plen, int64_t max_tokens, int64_t choices, int64_t cache_tokens,
                          const PromptNames& n) {
  choices = std::max<int64_t>(choices, 1);
  if (plen <= cache_tokens && max_tokens <= (cache_tokens - plen) / choices) return std::nullopt;
  return broken(n.max_tokens_field,
                n.prompt_name + " of " + std::to_string(plen) + " tokens + " + n.max_tokens_field + " " +
                    std::to_string(max_tokens) + (choices > 1 ? " × " + std::to_string(choices) + " choices" : "") +
                    " exceeds the KV cache of " + std::to_string(cache_tokens) + " positions (--kv-cache-memory)");
}

RuleVerdict min_tokens_rule(int64_t min_tokens, int64_t max_tokens, const PromptNames& n) {
  if (min_tokens < 0) return broken("min_tokens", "min_tokens must be ≥ 0, got " + std::to_string(min_tokens));
  if (min_tokens <= max_tokens) return std::nullopt;
  return broken("min_tokens", "min_tokens " + std::to_string(min_tokens) + " is more than " + n.max_tokens_field + " " +
                                  std::to_string(max_tokens));
}

RuleVerdict batch_rule(int64_t prompts, int64_t max_prompts) {
  if (prompts <= max_prompts) return std::nullopt;
  return broken("prompt", "a batch of " + std::to_string(prompts) + " prompts is more than the " +
                              std::to_string(max_prompts) +
                              " requests this server holds at once (--max-running-requests + "
                              "--max-waiting-requests): send them in smaller batches");
}

RuleVerdict reads_choices_rule(bool reads, int64_t choices) {
  if (!reads || choices <= 1) return std::nullopt;
  return broken("activations", "activations need one choice (n = 1 and best_of = 1), got " + std::to_string(choices));
}

}  // namespace olmo2
