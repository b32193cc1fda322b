#include "runtime/model/init.h"

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
