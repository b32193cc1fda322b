// Parsing a /v1/completions body (docs/architecture.md §8, API).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/serve/api/api_request.h"
#include "runtime/serve/api/served_model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// Parses and validates a /v1/completions body (OpenAI's legacy completions, with vLLM's
/// extensions). Fields:
/// - prompt (required): a string, a list of token ids, a list of strings, or a list of
///   token-id lists — one CompletionParams per prompt, in order, none empty. Texts are
///   encoded by `tokenizer` (no BOS added); ids must be in [0, served.vocab_size).
/// - n (1 … served.max_choices, default 1); best_of (n … max_choices, default n; more
///   than n with stream refused, as OpenAI: the best are known only at the end); every
///   prompt generates choices = max(n, best_of).
/// - max_tokens (≥ 1, default 16; 0 only with echo: the prompt is scored, nothing
///   generated); echo (bool); logprobs (0 … 20: top alternatives per token, given even
///   as 0 = the chosen token's own); echo with logprobs sets prompt_logprobs.
/// - stream, stream_options, return_tokens_as_token_ids (bool), model, and the fields of
///   read_generation_fields and read_unimplemented_fields (sampling_fields.h).
/// - activations and interventions (trace_fields.h, docs/architecture.md §13): every
///   prompt's params get the spec (trace_for_prompt: its own prompt_len; the worst-case
///   bytes of all prompts together within served.max_activation_bytes); activations
///   need n = best_of = 1.
/// Unknown fields are refused (a field that might change the output is never ignored;
/// OpenAI refuses unknown fields too, vLLM only warns). A prompt without a "seed" gets
/// choice_seed(fallback_seed, i) for prompt i: the prompts of a batch draw apart. Every
/// prompt passes check_lengths (as "prompt", or "prompt I" in a batch). Throws ApiError
/// (400) naming the field.
ApiRequest parse_completions(const std::string& body, const ServedModel& served, const Tokenizer& tokenizer,
                             uint64_t fallback_seed);

}  // namespace olmo2
