// Picking each sequence's next token from vocab-parallel logits without gathering the
// whole vocabulary (distributed argmax / top-k: docs/architecture.md §5, §8). The one
// token picker of the project: `olmo2 generate` and `olmo2 serve` both call it.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "ops/tensor.h"
#include "runtime/model/shard_spec.h"
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

/// Chooses the next token of every row. rows[i] is this rank's vocab slice of the logits
/// of row i: an f32 view of shard.vocab_rows.size() elements ([V_local] or [1, V_local];
/// ids vocab_rows.begin + j, real while below shard.vocab_real.end). Each row's
/// candidates come from ops::top_candidates: for rows on a device, run there for all of
/// them at once, and only the candidates and statistics are copied back (one ops::copy);
/// a device row sampled without top_k (or wanting more than kMaxDeviceTopCandidates) is
/// copied to the host whole first. Each TP rank sends only its own best candidates:
/// 1 for greedy, top_k for top-k sampling, the whole slice only for sampling without
/// top_k (top-p needs the whole sorted distribution) — one all-gather (of bytes: per
/// row each slice's max and Σexp for log-probabilities, then (logit f32, id i32) pairs)
/// for every row together. The merged
/// candidates are the global ones, so the result equals one process choosing from the
/// same whole logits (greedy: the first id among equal maxima; sampling: temperature,
/// top-k, top-p and the seeded draw of runtime/generation/sampling.h). (Under TP the logits themselves
/// differ from one process's in the last bits: row-parallel sums are split.) `tp` null or of size 1:
/// the slice is the whole vocabulary. Every TP rank returns the same tokens.
std::vector<SelectedToken> select_tokens(const std::vector<TensorView>& rows, const ShardSpec& shard,
                                         const std::vector<SelectionRequest>& requests,
                                         parallel::Communicator* tp);

}  // namespace olmo2
