// The request fields /v1/completions and /v1/chat/completions share (docs/architecture.md
// §8, API): sampling, penalties, logit bias, stops, streaming, the refusals of what this
// server does not implement, and the length checks.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/serve/api/api_request.h"
#include "runtime/serve/api/json_fields.h"
#include "runtime/serve/api/served_model.h"

namespace olmo2 {

/// `model`, when given, must be `served.name` (else ApiError 400 naming both).
void check_model_field(Fields& f, const ServedModel& served);

/// Reads into `p` (vLLM's and OpenAI's definitions and defaults), each value checked by
/// its rule in runtime/generation/request_rules.h (the JSON types here):
/// temperature (≥ 0, default 1; 0 greedy), top_p ((0, 1]), top_k (≥ 0, −1 none), min_p
/// ([0, 1]), seed (a 64-bit integer, signed or not; `fallback_seed` when absent), stop (a
/// string or a list of at most 16 non-empty strings), stop_token_ids (ids in
/// [0, vocab_size), sorted unique), presence_penalty and frequency_penalty ([−2, 2]),
/// repetition_penalty (> 0, 1 none), logit_bias (an object of decimal id strings in
/// [0, vocab_size) to numbers in [−100, 100]; sorted by id into adjust.logit_bias; two
/// keys of one id such as "7" and "07" refused), min_tokens (≥ 0; ≤ max_tokens is
/// check_lengths'), include_stop_str_in_output, skip_special_tokens (default true),
/// ignore_eos. Throws ApiError 400 naming the field and the value.
void read_generation_fields(Fields& f, const ServedModel& served, uint64_t fallback_seed, CompletionParams& p);

/// stream (bool) and stream_options ({include_usage: bool}, only with stream true, as
/// OpenAI; vLLM's continuous_usage_stats refused) into r.stream / r.include_usage.
void read_stream_fields(Fields& f, ApiRequest& r);

/// Refuses, naming the field, what a client may send to change the output that this
/// server does not implement, unless given as its no-op value: suffix (""), functions
/// ([]) and function_call ("none") (the deprecated forms of tools), use_beam_search (false),
/// length_penalty (1), early_stopping (false), prompt_logprobs (vLLM's separate field:
/// echo with logprobs gives the prompt's), truncate_prompt_tokens, allowed_token_ids,
/// bad_words ([]), logits_processors, spaces_between_special_tokens (true),
/// continue_final_message (false), chat_template, chat_template_kwargs ({}), documents,
/// audio, modalities (["text"]), prediction, reasoning_effort, web_search_options,
/// kv_transfer_params; and ignores user, metadata, store, service_tier,
/// safety_identifier, prompt_cache_key, request_id, priority, cache_salt (they cannot
/// change the output). add_special_tokens (a bool) is accepted and changes nothing:
/// the tokenizer adds no special tokens (docs/architecture.md §8).
void read_unimplemented_fields(Fields& f);

/// /v1/completions has no tools: refuses tools and tool_choice unless given as their
/// no-op values ([] and "none"), and accepts parallel_tool_calls (it only means
/// something with tools). Chat reads them with read_tool_fields (tool_fields.h).
void refuse_tool_fields(Fields& f);

/// How length errors name a prompt: `param` ("prompt", chat's "messages"), `name` in the
/// message ("prompt", "prompt 2" in a batch, chat's "the rendered prompt"), and whether its
/// ids came from the tokenizer (a text) or the client.
struct PromptLabel {
  std::string param = "prompt";
  std::string name = "prompt";
  bool from_text = false;
};

/// Checks one prompt against the model with the rule book (runtime/generation/request_rules.h:
/// prompt_rule, context_rule, kv_cache_rule, min_tokens_rule): ids in [0, vocab_size) (a tokenizer wider than
/// the model costs the request a 400, not the server); the prompt non-empty and shorter
/// than the context (as long as the context with max_tokens 0, echo's scoring only);
/// room for every choice: prompt + max_tokens ≤ context length and prompt + choices ×
/// max_tokens ≤ cache_tokens (the choices share the prompt's KV blocks; block rounding is
/// the scheduler's); min_tokens ≤ max_tokens. Messages state the numbers; errors about
/// max_tokens name `max_tokens_param` ("max_tokens", chat's "max_completion_tokens" when
/// that was given). A prompt is never cut. Throws ApiError 400.
void check_lengths(const CompletionParams& p, const ServedModel& served, const PromptLabel& label,
                   const std::string& max_tokens_param);

/// The largest max_tokens check_lengths accepts for `p` (prompt and choices set): chat's
/// default. ≤ 0 when the prompt leaves no room.
int64_t max_tokens_room(const CompletionParams& p, const ServedModel& served);

}  // namespace olmo2
