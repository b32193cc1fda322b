// bf16 tensors for the kernel tests: seeded random ones, their exact f32 widening, and
// the double-precision reference of the bf16 products.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/tensor.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops::test {

/// The bf16 bits of a seeded N(0, scale²) tensor (rounded to nearest even).
inline Tensor random_bf16(std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f) {
  const Tensor f = random_tensor(shape, seed, scale);
  Tensor b = Tensor::zeros(std::move(shape), DType::BF16);
  auto* bits = static_cast<uint16_t*>(b.view().data());
  for (int64_t i = 0; i < f.numel(); ++i) bits[i] = f32_to_bf16(f.f32()[i]);
  return b;
}

/// A contiguous bf16 tensor widened to f32 (exact).
inline Tensor widen(const Tensor& b) {
  Tensor f = Tensor::zeros(b.shape());
  convert_to_f32(b.view().data(), DType::BF16, f.f32(), static_cast<size_t>(b.numel()));
  return f;
}

inline bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

/// The error bound of the bf16 products' lane sequence: each lane adds ⌈K/32⌉·2 terms
/// by fmas, then 4 additions, so the error is within (K'/16 + 5)·2⁻²⁴·Σ|x·w| (K' = K
/// rounded up to 32). Every path is held to it, onednn included.
inline double lane_bound(int64_t k, double abs_sum) {
  const double kp = double((k + 31) / 32 * 32);
  return (kp / 16 + 5) * 0x1p-24 * abs_sum + 1e-30;
}

/// Σ_k bf16(x[m, k])·w[n, k] in double for contiguous x [M, K] f32 and widened w [N, K],
/// with Σ_k |…| beside it (the scale of the error bounds).
struct Reference {
  std::vector<double> value, abs_sum;
};
inline Reference bf16_product_reference(const Tensor& x, const Tensor& w_f32) {
  const int64_t m = x.shape()[0], k = x.shape()[1], n = w_f32.shape()[0];
  Reference r{std::vector<double>(static_cast<size_t>(m * n)), std::vector<double>(static_cast<size_t>(m * n))};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, a = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double t = double(round_bf16(x.f32()[i * k + p])) * w_f32.f32()[j * k + p];
        s += t;
        a += std::fabs(t);
      }
      r.value[static_cast<size_t>(i * n + j)] = s;
      r.abs_sum[static_cast<size_t>(i * n + j)] = a;
    }
  return r;
}

}  // namespace olmo2::ops::test
