// Plain RoPE and YaRN frequencies, each f32 operation where PyTorch rounds it
// (docs/architecture.md §3). Compiled without FMA contraction (CMakeLists.txt).
#include "runtime/model/rope_frequencies.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace olmo2 {

namespace {

/// `base ** (torch.arange(0, dim, 2, dtype=float) / dim)` element i: the exponent is an
/// f32 quotient, the power of the f32 base rounded once to f32 (PyTorch's f32 pow is
/// within an ulp of exact and matches the correctly rounded value on the fixtures).
float pos_freq(float base, int i, int dim) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
  return static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
}

/// find_correction_dim of _compute_yarn_parameters, in double as Python computes it.
double correction_dim(double rotations, int dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
}

}  // namespace

ops::RopeFrequencies rope_frequencies(const RopeParameters& p, int head_dim) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    OLMO2_THROW(InputError, "RoPE needs a positive even head_dim, got ", head_dim);
  }
  if (p.type != "default" && p.type != "yarn") {
    OLMO2_THROW(InputError, "RoPE type \"", p.type, "\" is not supported (default, yarn)");
  }
  if (!(p.theta > 0)) OLMO2_THROW(InputError, "rope_theta must be positive, got ", p.theta);
  const int dim = head_dim, half = head_dim / 2;
  const float base = static_cast<float>(p.theta);
  ops::RopeFrequencies f;
  f.inv_freq.resize(static_cast<size_t>(half));
  // compute_default_rope_parameters: the ops' own table, so OLMo 2 keeps its bits.
  if (p.type == "default") return ops::RopeFrequencies::standard(base, head_dim);

  // _compute_yarn_parameters (transformers 5.24, modeling_rope_utils.py).
  if (!(p.factor >= 1)) OLMO2_THROW(InputError, "YaRN factor must be ≥ 1, got ", p.factor);
  if (p.original_max_position_embeddings <= 0) {
    OLMO2_THROW(InputError, "YaRN original_max_position_embeddings must be positive, got ",
                p.original_max_position_embeddings);
  }
  if (!(p.beta_slow > 0) || !(p.beta_fast >= p.beta_slow)) {
    OLMO2_THROW(InputError, "YaRN needs beta_fast ≥ beta_slow > 0, got beta_fast ", p.beta_fast,
                ", beta_slow ", p.beta_slow);
  }
  const double max_pos = static_cast<double>(p.original_max_position_embeddings);
  double low = correction_dim(p.beta_fast, dim, p.theta, max_pos);
  double high = correction_dim(p.beta_slow, dim, p.theta, max_pos);
  if (p.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // linear_ramp_factor's guard against a zero span
  const float low_f = static_cast<float>(low), span_f = static_cast<float>(high - low);
  const float factor_f = static_cast<float>(p.factor);
  for (int i = 0; i < half; ++i) {
    const float pf = pos_freq(base, i, dim);
    const float extrapolation = 1.0f / pf;
    const float interpolation = 1.0f / (factor_f * pf);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span_f, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float a = interpolation * (1.0f - extrapolation_factor);
    const float b = extrapolation * extrapolation_factor;
    f.inv_freq[static_cast<size_t>(i)] = a + b;
  }
  double scaling = 1.0;  // get_mscale(factor)
  if (p.attention_factor) scaling = *p.attention_factor;
  else if (p.factor > 1) scaling = 0.1 * std::log(p.factor) + 1.0;
  f.attention_scaling = static_cast<float>(scaling);
  return f;
}

}  // namespace olmo2
