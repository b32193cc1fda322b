// Next-token sampling: temperature, min-p, top-k, top-p (nucleus), seeded. The order of
// operations is vLLM's sampler's: temperature, min_p (drop every token whose probability
// is below min_p × the largest), top-k, then top-p over the renormalised remaining
// probabilities (min_p and top-k both keep a most-likely prefix, so they commute; HF's
// processors run temperature, top-k, top-p in the same way); a draw is u ∈ [0, 1) with 53 random bits from
// a counter-based splitmix64 stream of the request's seed, taking the first candidate
// (most likely first) whose cumulative probability exceeds u. Token selection
// (token_selection.h) applies these to the candidates of every tensor-parallel rank.
#pragma once

#include <cstdint>
#include <vector>

namespace olmo2 {

/// How the next token is chosen from the logits. temperature 0 is greedy (argmax).
struct SamplingParams {
  double temperature = 0.0;  ///< ≥ 0; logits are divided by it before the softmax
  int64_t top_k = 0;         ///< keep the k most likely tokens (0: all)
  double top_p = 1.0;        ///< keep the smallest set of most likely tokens whose
                             ///< probabilities sum to ≥ top_p, in (0, 1]
  double min_p = 0.0;        ///< drop tokens whose probability is below min_p × the
                             ///< largest one's, in [0, 1] (vLLM's min_p)
  uint64_t seed = 0;         ///< the same seed and logits give the same tokens
};

/// Index of the largest of n values (first on ties, as `torch.argmax`).
int32_t argmax(const float* values, int64_t n);

/// Throws InputError naming the field when one of sampling_rules (request_rules.h) is
/// broken: temperature < 0 or not finite, top_p outside (0, 1], top_k < 0, min_p outside
/// [0, 1].
void validate(const SamplingParams& p);

/// A logit and its token id; candidates are ordered most likely first (higher logit,
/// then lower id on ties, as argmax).
struct Candidate {
  float logit;
  int32_t id;
};
inline bool more_likely(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

/// The sampling step on candidates already sorted most likely first and already cut to
/// top_k: temperature softmax, min_p (a candidate is kept when exp((l − l_max)/T) ≥
/// min_p, in double), top-p over what min_p kept, then the draw number `draw`
/// of the request (0 for its first sampled token) from its seed — the splitmix64
/// sequence is counter-based, so any rank can make draw n without the n−1 before it.
/// Greedy (temperature 0) returns candidates[0]. Throws Error for no candidates.
int32_t sample_sorted(const std::vector<Candidate>& sorted, const SamplingParams& params, uint64_t draw);

/// Sampling over the whole vocabulary (top_k 0): `by_id` holds every candidate in
/// increasing id order. The same draw as sample_sorted on the sorted list (min_p
/// included), except that the total probability mass (of the candidates min_p keeps) is
/// summed in id order — which needs no sort — and only the
/// most likely prefix that top-p and the draw actually reach is sorted (chunks of 64,
/// doubling). A full sort of a 100k vocabulary took ~25 ms per token; a peaked
/// distribution now needs one O(V) pass. Throws Error for no candidates.
int32_t sample_whole_vocabulary(const std::vector<Candidate>& by_id, const SamplingParams& params, uint64_t draw);

}  // namespace olmo2
