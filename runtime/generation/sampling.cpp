#include "runtime/generation/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "runtime/generation/request_rules.h"

namespace olmo2 {

int32_t argmax(const float* values, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (values[i] > values[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

void validate(const SamplingParams& p) { throw_if_broken(sampling_rules(p)); }

namespace {
/// splitmix64 (Steele, Lea, Flood 2014): draw n uses state seed + (n+1)·γ; 53 bits → [0, 1).
double uniform_draw(uint64_t seed, uint64_t draw) {
  uint64_t z = seed + (draw + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}
}  // namespace

int32_t sample_sorted(const std::vector<Candidate>& c, const SamplingParams& p, uint64_t draw) {
  OLMO2_CHECK(!c.empty(), "sampling from no candidates");
  if (p.temperature == 0) return c[0].id;
  std::vector<double> prob(c.size());
  const double mx = c[0].logit;
  double sum = 0;
  size_t keep = c.size();  // min_p: the most likely prefix whose probability ≥ min_p × the largest (1 here)
  for (size_t i = 0; i < c.size(); ++i) {
    prob[i] = std::exp((c[i].logit - mx) / p.temperature);
    if (prob[i] < p.min_p) {
      keep = i;
      break;
    }
    sum += prob[i];
  }
  if (p.top_p < 1) {
    double cum = 0;
    const size_t kept = keep;
    for (size_t i = 0; i < kept; ++i) {
      cum += prob[i] / sum;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = std::accumulate(prob.begin(), prob.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  const double u = uniform_draw(p.seed, draw) * sum;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += prob[i];
    if (u < cum) return c[i].id;
  }
  return c[keep - 1].id;
}

int32_t sample_whole_vocabulary(const std::vector<Candidate>& c, const SamplingParams& p, uint64_t draw) {
  OLMO2_CHECK(!c.empty(), "sampling from no candidates");
  const size_t n = c.size();
  if (p.temperature == 0) return std::min_element(c.begin(), c.end(), more_likely)->id;
  double mx = c[0].logit;
  for (const Candidate& k : c) mx = std::max(mx, static_cast<double>(k.logit));
  std::vector<double> prob(n);
  double total = 0;  // in id order: no sort needed
  size_t kept_by_min_p = 0;  // min_p keeps a most-likely prefix of the sorted order: count it
  for (size_t i = 0; i < n; ++i) {
    prob[i] = std::exp((c[i].logit - mx) / p.temperature);
    if (prob[i] >= p.min_p) {
      total += prob[i];
      ++kept_by_min_p;
    }
  }
  // order[0 … sorted) are the most likely candidates, most likely first; the rest unsorted.
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  size_t sorted = 0, chunk = 64;
  auto by_likelihood = [&](uint32_t a, uint32_t b) { return more_likely(c[a], c[b]); };
  auto sorted_up_to = [&](size_t want) {  // makes order[0 … want) sorted
    if (want <= sorted) return;
    want = std::max(want, std::min(n, sorted + chunk));
    chunk *= 2;
    if (want < n) std::nth_element(order.begin() + static_cast<std::ptrdiff_t>(sorted),
                                   order.begin() + static_cast<std::ptrdiff_t>(want), order.end(), by_likelihood);
    std::sort(order.begin() + static_cast<std::ptrdiff_t>(sorted), order.begin() + static_cast<std::ptrdiff_t>(want),
              by_likelihood);
    sorted = want;
  };
  size_t keep = kept_by_min_p;
  double sum = total;
  if (p.top_p < 1) {
    double cum = 0, kept = 0;
    for (size_t i = 0; i < kept_by_min_p; ++i) {
      sorted_up_to(i + 1);
      cum += prob[order[i]] / total;
      kept += prob[order[i]];
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = kept;
  }
  const double u = uniform_draw(p.seed, draw) * sum;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    sorted_up_to(i + 1);
    cum += prob[order[i]];
    if (u < cum) return c[order[i]].id;
  }
  sorted_up_to(keep);
  return c[order[keep - 1]].id;
}

}  // namespace olmo2
