// Picking each sequence's next token from vocab-parallel logits without gathering the
// whole vocabulary (DESIGN §4: distributed argmax / top-k).
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/model/model.h"
#include "runtime/generation/sampling.h"

namespace olmo2 {

/// What one sequence asks of this step's token choice.
struct SelectionRequest {
  SamplingParams params;
  uint64_t draw = 0;     ///< index of the token being drawn (tokens generated so far)
  int32_t logprobs = 0;  ///< alternatives to report with their log-probabilities (0: none)
};

/// The chosen token, and with logprobs its log-probability and the `logprobs` most
/// likely tokens' (log_softmax of the raw logits, before temperature, as vLLM reports).
struct SelectedToken {
  int32_t id = -1;
  float logprob = 0;
  std::vector<Candidate> top;  ///< logit field holds the log-probability
};

/// Chooses the next token of every row. rows[i] points at this rank's vocab slice of
/// the logits of row i (shard.vocab_rows.size() floats; ids vocab_rows.begin + j, real
/// while below shard.vocab_real.end). Each TP rank sends only its own best candidates:
/// 1 for greedy, top_k for top-k sampling, the whole slice only for sampling without
/// top_k (top-p needs the whole sorted distribution) — one all-gather for every row
/// together, plus each slice's max and Σexp for log-probabilities. The merged
/// candidates are the global ones, so the result equals Sampler on the same whole
/// logits (greedy: the first id among equal maxima). (Under TP the logits themselves
/// differ from one process's in the last bits: row-parallel sums are split.) `tp` null or of size 1:
/// the slice is the whole vocabulary. Every TP rank returns the same tokens.
std::vector<SelectedToken> select_tokens(const std::vector<const float*>& rows, const ShardSpec& shard,
                                         const std::vector<SelectionRequest>& requests,
                                         parallel::Communicator* tp);

}  // namespace olmo2
