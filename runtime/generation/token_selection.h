// Picking each sequence's next token from vocab-parallel logits without gathering the
// whole vocabulary (distributed argmax / top-k: docs/architecture.md §5, §8). The one
// token picker of the project: `olmo2 generate` and `olmo2 serve` both call it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "ops/tensor.h"
#include "runtime/model/shard_spec.h"
#include "runtime/generation/logits_adjustments.h"
#include "runtime/generation/sampling.h"

namespace olmo2 {

/// What one sequence asks of this step's token choice (or, with `target`, of the scoring
/// of one prompt position).
struct SelectionRequest {
  SamplingParams params;
  uint64_t draw = 0;     ///< index of the token being drawn (tokens generated so far)
  int32_t logprobs = 0;  ///< alternatives to report with their log-probabilities (0: none)
  /// logit_bias and the penalties, applied to the raw logits before temperature
  /// (runtime/generation/logits_adjustments.h), each rank to its own vocab slice.
  LogitsAdjustments adjust;
  std::vector<int32_t> banned;      ///< ids set to −∞ first (min_tokens: EOS, stop_token_ids); ascending, unique
  std::vector<int32_t> prompt_ids;  ///< the prompt's distinct ids, ascending (repetition penalty only)
  /// (id, times generated) of the output's distinct ids, ascending (any penalty only).
  std::vector<std::pair<int32_t, int32_t>> output_counts;
  /// ≥ 0: nothing is sampled (prompt logprobs): the result's id is `target`, its logprob
  /// the target's log-probability (from the rank whose slice holds it), top the
  /// `logprobs` most likely tokens; params and the adjustments are ignored.
  int32_t target = -1;
  /// Structured outputs (docs/architecture.md §8, "Structured outputs"): the ids the
  /// constraint allows next, a bitmask over the model's vocabulary (bit id % 64 of word
  /// id / 64; ⌈vocab_size / 64⌉ words or fewer, ids past the words are disallowed).
  /// Every other id of the rank's slice gets −∞ first, before the ban and the
  /// adjustments. Null: unconstrained.
  std::shared_ptr<const std::vector<uint64_t>> allowed;
  /// Whether the adjustments change the logits this request chooses from.
  bool adjusted() const { return target < 0 && (adjust.any() || !banned.empty() || allowed); }
};

/// The chosen token, and with logprobs its log-probability and the `logprobs` most
/// likely tokens' — log_softmax of the raw logits, before the adjustments and temperature,
/// as vLLM reports by default (its logprobs mode "raw_logprobs"): with a logit_bias or a
/// penalty, the chosen token's and the alternatives' log-probabilities are those of the
/// unadjusted distribution, and the alternatives are its most likely tokens.
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
///
/// Adjusted rows (an allowed-token mask, logit_bias, penalties, banned ids): each rank applies them to a host
/// copy of its own slice (ids outside it are skipped: no rank gathers the whole
/// vocabulary for them; a row on a device is copied to the host whole first) and sends
/// the candidates of the adjusted slice — with logprobs also their raw logits, and the
/// raw slice's `logprobs` best candidates — so the token is chosen from the adjusted
/// distribution and reported from the raw one. Target rows (prompt logprobs) send the
/// raw slice's `logprobs` best candidates and, from the rank holding it, the target's
/// raw logit (on a device: the top candidates there and the target's value gathered
/// there, copied back with them). Throws Error for rows and requests of different
/// counts, a row of another size or dtype, and adjustment lists out of order.
std::vector<SelectedToken> select_tokens(const std::vector<TensorView>& rows, const ShardSpec& shard,
                                         const std::vector<SelectionRequest>& requests,
                                         parallel::Communicator* tp);

}  // namespace olmo2
