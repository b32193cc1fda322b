#include "runtime/model/init.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "ops/tensor_ops.h"

namespace olmo2 {

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kElement = 0xd1b54a32d192ed03ull;
constexpr int kMaxAttempts = 64;

double value_from_key(uint64_t key, int64_t g, double std) {
  const uint64_t s = key ^ (static_cast<uint64_t>(g) * kElement);
  uint64_t k = 0;
  for (int j = 0; j < kMaxAttempts; ++j) {
    const uint64_t r1 = splitmix64_mix(s + (++k) * kGolden);
    const uint64_t r2 = splitmix64_mix(s + (++k) * kGolden);
    const double u1 = static_cast<double>((r1 >> 11) + 1) * 0x1p-53;
    const double u2 = static_cast<double>(r2 >> 11) * 0x1p-53;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    if (std::fabs(z) <= 3.0) return std * z;
  }
  return 0.0;
}

}  // namespace

double init_value(uint64_t seed, const std::string& name, int64_t g, double std) {
  return value_from_key(splitmix64_mix(seed ^ fnv1a64(name)), g, std);
}

namespace {

/// A bijective 32-bit mixer (xor-shift-multiply rounds).
inline uint32_t mix32(uint32_t x) {
  x = (x ^ (x >> 16)) * 0x7feb352du;
  x = (x ^ (x >> 15)) * 0x846ca68bu;
  return x ^ (x >> 16);
}

/// ln u for u in (0, 1]: u = 2^e·m with m in [√½, √2), ln m = 2·atanh(s), s = (m−1)/(m+1)
/// (|s| ≤ 0.172: the series to s⁹ is exact to 2e-9).
inline float log_unit(float u) {
  const uint32_t bits = std::bit_cast<uint32_t>(u), mant = bits & 0x7fffffu;
  const uint32_t big = (mant + 0x4afb0du) >> 23;  // 1 when 1.mant ≥ √2 (0x3504f3): no branch
  const float e = static_cast<float>(static_cast<int32_t>((bits >> 23) + big) - 127);
  const float m = std::bit_cast<float>(mant | (0x3f800000u - (big << 23)));
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  const float p = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
  return e * 0.693147180559945f + 2.0f * s * p;
}

/// The two normal values of pair p: u1 in (0, 1] and u2 in [0, 1) from two hashes,
/// r = √(−2 ln u1), θ = 2π·u2 = q·π/2 + π/4 + b (quadrant q = ⌊4·u2⌋, |b| ≤ π/4; sin b
/// and cos b by their Taylor polynomials to b⁹ and b⁸), then r·cos θ and r·sin θ.
inline void normal_pair(uint32_t p, uint32_t k0, uint32_t hi, float& z0, float& z1) {
  const uint32_t h1 = mix32(p + k0), h2 = mix32(h1 ^ hi);
  const float u1 = static_cast<float>((h1 >> 8) + 1) * 0x1p-24f;
  const float t = static_cast<float>(h2 >> 8) * 0x1p-22f;  // 4·u2, in [0, 4)
  const float r = std::sqrt(-2.0f * log_unit(u1));
  const int q = static_cast<int>(t);
  const float b = (t - static_cast<float>(q) - 0.5f) * 1.57079632679f, b2 = b * b;
  const float sb = b * (1 - b2 * (1.0f / 6) * (1 - b2 * (1.0f / 20) * (1 - b2 * (1.0f / 42) * (1 - b2 * (1.0f / 72)))));
  const float cb = 1 - b2 * 0.5f * (1 - b2 * (1.0f / 12) * (1 - b2 * (1.0f / 30) * (1 - b2 * (1.0f / 56))));
  const float c = 0.707106781f * (cb - sb), s = 0.707106781f * (cb + sb);  // of π/4 + b
  // Rotate by q quarter turns: odd q maps (c, s) to (−s, c), q ≥ 2 negates both.
  const float odd = static_cast<float>(q & 1), sign = r * (1.0f - static_cast<float>(q & 2));
  z0 = sign * (c - odd * (s + c));
  z1 = sign * (s + odd * (c - s));
}

// One clone per x86 vector width, picked at load time; -ffp-contract=off (CMakeLists.txt)
// keeps every clone's values the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OLMO2_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OLMO2_VECTOR_CLONES
#endif

/// Pairs b0 … b0+m−1 into out[2·b0 …]; b0 a multiple of 2^14, m ≤ 2^14 (one value of
/// the counter's high bits).
OLMO2_VECTOR_CLONES void normal_pairs(float* out, int64_t b0, int64_t m, uint64_t key, float std) {
  const uint32_t k0 = static_cast<uint32_t>(key), hi = mix32(static_cast<uint32_t>(b0 >> 32) ^ static_cast<uint32_t>(key >> 32));
  float* o = out + 2 * b0;
#pragma omp simd
  for (int64_t i = 0; i < m; ++i) {
    float z0, z1;
    normal_pair(static_cast<uint32_t>(b0 + i), k0, hi, z0, z1);
    o[2 * i] = std * z0;
    o[2 * i + 1] = std * z1;
  }
}

}  // namespace

void fill_normal(float* out, int64_t n, uint64_t key, float std) {
  const int64_t pairs = n / 2;
  constexpr int64_t kBlock = int64_t{1} << 14;
#pragma omp parallel for schedule(static) if (pairs > kBlock)
  for (int64_t b0 = 0; b0 < pairs; b0 += kBlock) normal_pairs(out, b0, std::min(kBlock, pairs - b0), key, std);
  if (n % 2) {  // the last element: the first value of pair n/2
    float z0, z1;
    normal_pair(static_cast<uint32_t>(pairs), static_cast<uint32_t>(key),
                mix32(static_cast<uint32_t>(pairs >> 32) ^ static_cast<uint32_t>(key >> 32)), z0, z1);
    out[n - 1] = std * z0;
  }
}

bool is_norm_weight(const std::string& name) { return name.ends_with("norm.weight"); }

namespace {
/// init_parameter's values into `out`, a host f32 view of p's local shape.
void fill_initial_values(const Parameter& p, const TensorView& target, uint64_t seed, double std) {
  float* out = target.f32();
  const int64_t n = p.numel();
  if (is_norm_weight(p.name)) {
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
    for (int64_t i = 0; i < n; ++i) out[i] = p.global_index(i) < 0 ? 0.0f : 1.0f;
    return;
  }
  const uint64_t key = splitmix64_mix(seed ^ fnv1a64(p.name));
  // Runs of the last dimension map to contiguous runs of the full tensor: one
  // global_index call per run. When the last dimension is the sharded one, the run's
  // tail past the full width is padding.
  const std::vector<int64_t>& shape = p.value->shape();
  const int last = static_cast<int>(shape.size()) - 1;
  const int64_t width = shape.empty() ? 1 : shape.back();
  const int64_t runs = n / width;
  const bool last_sharded = p.shard_dim >= 0 && p.shard_dim == last;
  const int64_t real_width =
      last_sharded ? std::max<int64_t>(0, p.full_shape[static_cast<size_t>(last)] - p.shard_begin) : width;
#pragma omp parallel for schedule(static) if (n >= (1 << 12))
  for (int64_t r = 0; r < runs; ++r) {
    float* row = out + r * width;
    const int64_t g0 = p.global_index(r * width);
    for (int64_t c = 0; c < width; ++c) {
      row[c] = (g0 < 0 || c >= real_width) ? 0.0f : static_cast<float>(value_from_key(key, g0 + c, std));
    }
  }
}

}  // namespace

void init_parameter(const Parameter& p, uint64_t seed, double std) {
  if (!(std >= 0.0) || !std::isfinite(std)) {
    OLMO2_THROW(InputError, "initialisation std ", std, " of ", p.name, " must be a finite number >= 0");
  }
  if (p.numel() == 0) return;
  if (p.value->device() == Device::CPU) return fill_initial_values(p, p.value->view(), seed, std);
  // Computed on the host (each value a function of seed, name and index), then copied.
  const Tensor host = Tensor::zeros(p.value->shape());
  fill_initial_values(p, host.view(), seed, std);
  ops::copy(host.view(), p.value->view());
}

void init_parameters(std::vector<Parameter>& params, uint64_t seed, double std) {
  for (const Parameter& p : params) init_parameter(p, seed, std);
}

}  // namespace olmo2
