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

Sampler::Sampler(const SamplingParams& params) : p_(params) { validate(params); }

int32_t Sampler::next(const float* logits, int64_t n) {
  OLMO2_CHECK(n > 0, "sampling from ", n, " logits");
  if (p_.temperature == 0) return argmax(logits, n);
  std::vector<Candidate> c(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) c[static_cast<size_t>(i)] = {logits[i], static_cast<int32_t>(i)};
  const int64_t k = p_.top_k > 0 ? std::min(p_.top_k, n) : n;
  std::partial_sort(c.begin(), c.begin() + k, c.end(), more_likely);
  c.resize(static_cast<size_t>(k));
  return sample_sorted(c, p_, draws_++);
}

int32_t sample_sorted(const std::vector<Candidate>& c, const SamplingParams& p, uint64_t draw) {
  OLMO2_CHECK(!c.empty(), "sampling from no candidates");
  if (p.temperature == 0) return c[0].id;
  std::vector<double> prob(c.size());
  const double mx = c[0].logit;
  double sum = 0;
  for (size_t i = 0; i < c.size(); ++i) sum += prob[i] = std::exp((c[i].logit - mx) / p.temperature);
  size_t keep = c.size();
  if (p.top_p < 1) {
    double cum = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      cum += prob[i] / sum;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = std::accumulate(prob.begin(), prob.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  // splitmix64 (Steele, Lea, Flood 2014): draw n uses state seed + (n+1)·γ; 53 bits → u ∈ [0, 1).
  uint64_t z = p.seed + (draw + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * 0x1.0p-53 * sum;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += prob[i];
    if (u < cum) return c[i].id;
  }
  return c[keep - 1].id;
}

}  // namespace olmo2
