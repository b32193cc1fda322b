// What the server serves, as the API's validation and /v1/models see it.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/generation/generation_config.h"
#include "runtime/model/config.h"
#include "runtime/structured/constraint.h"

namespace olmo2 {

/// The served model's limits (launcher/serve_command.cpp fills them at start).
struct ServedModel {
  std::string name;             ///< the "model" a request must name (when it names one)
  int64_t context_length = 0;   ///< max_position_embeddings
  int64_t vocab_size = 0;       ///< rows of the logits (≥ the tokenizer's ids when padded)
  int64_t cache_tokens = 0;     ///< positions the whole KV cache holds
  /// Most sequences one prompt may fork into (max(n, best_of)); launcher sets it to
  /// --max-running-requests, since every choice runs as its own sequence.
  int64_t max_choices = 128;
  /// Most prompts one request may carry: the requests the engine holds at once
  /// (--max-running-requests + --max-waiting-requests); a larger batch could never be
  /// admitted, so it is a 400 naming `prompt`, not a 503 "retry later".
  int64_t max_prompts = 320;
  /// The model's configuration: names, layers, heads and sizes that a request's
  /// `activations` and `interventions` are checked against (docs/architecture.md §13).
  ModelConfig config{};
  /// --max-activation-bytes: the most bytes (f32) one prompt's reads may return at worst
  /// (trace::activation_bytes), else 400 naming `activations`.
  int64_t max_activation_bytes = int64_t{64} << 20;
  /// Structured outputs (docs/architecture.md §8): how JSON Schema and json_object
  /// constraints compile — the whitespace between JSON tokens (--structured-whitespace:
  /// compact, OpenAI strict mode's form, by default).
  structured::JsonSchemaOptions json_options{};
  /// generation_config.json's sampling values (unless --generation-config ignore): the
  /// defaults of requests that leave temperature, top_p, top_k, min_p,
  /// repetition_penalty or max_tokens out, as vLLM's --generation-config auto
  /// (docs/architecture.md §8, "Stop ids and sampling defaults"); do_sample is ignored,
  /// as vLLM does.
  GenerationDefaults defaults{};
};

}  // namespace olmo2
