// Seeded N(0, scale²) f32 tensors for the kernel tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "ops/tensor.h"

namespace olmo2::ops::test {

inline Tensor random_tensor(std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::zeros(std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
  return t;
}

}  // namespace olmo2::ops::test
