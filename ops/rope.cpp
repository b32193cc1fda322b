// The device-independent part of RoPE (ops/rope.h; docs/architecture.md §3): plain
// RoPE's frequencies, shared by the CPU and CUDA kernels and by rope_frequencies.
#include "ops/rope.h"

#include <cmath>

#include "core/error.h"

namespace olmo2::ops {

RopeFrequencies RopeFrequencies::standard(float theta, int head_dim) {
  OLMO2_CHECK(head_dim >= 0 && head_dim % 2 == 0, "RopeFrequencies::standard: head_dim ", head_dim,
              " is not an even number ≥ 0");
  RopeFrequencies f;
  f.inv_freq.resize(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    f.inv_freq[static_cast<size_t>(i)] =
        1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
  return f;
}

}  // namespace olmo2::ops
