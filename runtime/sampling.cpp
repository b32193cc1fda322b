#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/error.h"
#include "runtime/generate.h"

namespace olmo2 {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature)) {
    OLMO2_THROW(InputError, "temperature must be a finite number ≥ 0, got ", p.temperature);
  }
  if (p.top_k < 0) OLMO2_THROW(InputError, "top_k must be ≥ 0 (0: no limit), got ", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) OLMO2_THROW(InputError, "top_p must be in (0, 1], got ", p.top_p);
}

Sampler::Sampler(const SamplingParams& params) : p_(params), state_(params.seed) { validate(params); }

int32_t Sampler::next(const float* logits, int64_t n) {
  OLMO2_CHECK(n > 0, "sampling from ", n, " logits");
  if (p_.temperature == 0) return argmax(logits, n);
  // Candidates, most likely first (ties: lower id first).
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  auto more_likely = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const int64_t k = p_.top_k > 0 ? std::min(p_.top_k, n) : n;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), more_likely);
  ids.resize(static_cast<size_t>(k));
  std::vector<double> prob(ids.size());
  const double mx = logits[ids[0]];
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) sum += prob[i] = std::exp((logits[ids[i]] - mx) / p_.temperature);
  size_t keep = ids.size();
  if (p_.top_p < 1) {
    double cum = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      cum += prob[i] / sum;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = std::accumulate(prob.begin(), prob.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  // splitmix64 step (Steele, Lea, Flood 2014), 53 bits → u ∈ [0, 1).
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * 0x1.0p-53 * sum;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += prob[i];
    if (u < cum) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace olmo2
