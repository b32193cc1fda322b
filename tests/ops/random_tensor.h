// Seeded random tensors for the kernel tests: N(0, scale²) values in f32 or bf16, and
// values on a grid that makes short dot products exact.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "ops/dtype.h"
#include "ops/tensor.h"

namespace olmo2::ops::test {

inline Tensor random_tensor(std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::zeros(std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
  return t;
}

/// Seeded N(0, scale²) values in `dtype`: f32, or bf16 (each value rounded to nearest
/// even). The f32 values are random_tensor's.
inline Tensor random_tensor_of(std::vector<int64_t> shape, uint64_t seed, DType dtype, float scale = 1.0f) {
  Tensor t = Tensor::zeros(std::move(shape), dtype);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = dist(rng);
    if (dtype == DType::F32) t.f32()[i] = v;
    else static_cast<uint16_t*>(t.view().data())[i] = f32_to_bf16(v);
  }
  return t;
}

/// Seeded f32 multiples of 1/16 in [−2, 2]: every dot product of up to 256 of them
/// (each product a multiple of 2⁻⁸, the sum below 2¹¹) is exact in fp32 in any order,
/// so implementations that round scores to bf16 round the same values (attention tests).
inline Tensor random_grid_tensor(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t = Tensor::zeros(std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> steps(-32, 32);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = steps(rng) / 16.0f;
  return t;
}

}  // namespace olmo2::ops::test
