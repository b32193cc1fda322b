// The rule book of a generation request's fields (docs/architecture.md §8, "One rule per
// field"): each rule is written once, here, and returns the field it names and why it
// is broken. The OpenAI-style API turns a broken rule into a 400 naming the field
// (runtime/serve/api/), the engine and `generate` into an InputError with the same
// words. Ranges are vLLM's and OpenAI's (their sampling parameters' docs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/generation/logits_adjustments.h"
#include "runtime/generation/sampling.h"

namespace olmo2 {

/// A broken rule: `field` as the API spells it ("temperature", "max_completion_tokens",
/// "messages"), `reason` a whole sentence naming the field and the value.
struct FieldProblem {
  std::string field;
  std::string reason;
};
/// nullopt: the rule holds.
using RuleVerdict = std::optional<FieldProblem>;

/// Throws InputError with the reason when `v` holds a problem.
void throw_if_broken(const RuleVerdict& v);

/// temperature: finite and ≥ 0 (0: greedy).
RuleVerdict temperature_rule(double temperature);
/// top_p: in (0, 1].
RuleVerdict top_p_rule(double top_p);
/// top_k: ≥ 0 (0: no limit; the API reads vLLM's −1 as 0 first).
RuleVerdict top_k_rule(int64_t top_k);
/// min_p: in [0, 1].
RuleVerdict min_p_rule(double min_p);
/// The four above, in that order: the first broken one.
RuleVerdict sampling_rules(const SamplingParams& p);

/// presence_penalty and frequency_penalty: in [−2, 2] (OpenAI's range).
RuleVerdict presence_penalty_rule(double v);
RuleVerdict frequency_penalty_rule(double v);
/// repetition_penalty: finite and > 0 (1: none).
RuleVerdict repetition_penalty_rule(double v);
/// logit_bias as (token id, bias) pairs: ids in [0, vocab_size), ascending without
/// repeats (two JSON keys of one id, "7" and "07", are a repeat), each bias finite and in
/// [−100, 100].
RuleVerdict logit_bias_rule(const std::vector<std::pair<int32_t, float>>& bias, int64_t vocab_size);
/// The three penalties and the logit bias, in that order.
RuleVerdict adjustment_rules(const LogitsAdjustments& adjust, int64_t vocab_size);

/// One token id a client gave in `field` (`where` names its place, e.g.
/// "stop_token_ids[2]"): in [0, vocab_size).
RuleVerdict token_id_rule(const std::string& field, const std::string& where, int64_t id, int64_t vocab_size);

/// How the length rules name a prompt and the generation budget: `prompt_field` ("prompt",
/// chat's "messages"), `prompt_name` in the sentence ("prompt", "prompt 2" of a batch,
/// "the rendered prompt"), whether its ids came from the tokenizer (a text: an id outside
/// the model's vocabulary is then the tokenizer's fault), and `max_tokens_field`
/// ("max_tokens", chat's "max_completion_tokens", the command line's "--max-tokens").
struct PromptNames {
  std::string prompt_field = "prompt";
  std::string prompt_name = "prompt";
  bool from_text = false;
  std::string max_tokens_field = "max_tokens";
};

/// The prompt: non-empty (no BOS is added) and every id in [0, vocab_size).
RuleVerdict prompt_rule(const std::vector<int32_t>& prompt, int64_t vocab_size, const PromptNames& names);
/// max_tokens ≥ 1, or ≥ 0 when `zero_allowed` (echo: the prompt is only scored).
RuleVerdict max_tokens_rule(int64_t max_tokens, bool zero_allowed, const PromptNames& names);
/// Room in the context: prompt_len < context_length (≤ with max_tokens 0) and
/// prompt_len + max_tokens ≤ context_length (checked without overflow).
RuleVerdict context_rule(int64_t prompt_len, int64_t max_tokens, int64_t context_length, const PromptNames& names);
/// Room in the KV cache: prompt_len + choices × max_tokens ≤ cache_tokens (the choices
/// share the prompt's blocks; block rounding is the scheduler's).
RuleVerdict kv_cache_rule(int64_t prompt_len, int64_t max_tokens, int64_t choices, int64_t cache_tokens,
                          const PromptNames& names);
/// min_tokens: ≥ 0 and ≤ max_tokens.
RuleVerdict min_tokens_rule(int64_t min_tokens, int64_t max_tokens, const PromptNames& names);
/// A batch of `prompts` prompts in one request: at most `max_prompts`, the requests a
/// server holds at once (a larger batch could never be admitted).
RuleVerdict batch_rule(int64_t prompts, int64_t max_prompts);
/// Activation reads need one choice (n = 1 and best_of = 1).
RuleVerdict reads_choices_rule(bool reads, int64_t choices);

}  // namespace olmo2
