// What the server serves, as the API's validation and /v1/models see it.
#pragma once

#include <cstdint>
#include <string>

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
};

}  // namespace olmo2
