#include "ops/rope.h"

#include "ops/cpu/kernels.h"

#include <cmath>
#include <vector>

namespace olmo2::ops {

void cpu::rope(const TensorView& x, const TensorView& pos, int n_heads, int head_dim, float theta) {
  OLMO2_CHECK(x.dim() == 2 && x.size(1) == static_cast<int64_t>(n_heads) * head_dim &&
                  head_dim % 2 == 0 && x.stride(1) == 1,
              "rope: x ", x.shape_str(), " n_heads ", n_heads, " head_dim ", head_dim);
  OLMO2_CHECK(pos.dim() == 1 && pos.size(0) == x.size(0) && pos.stride(0) == 1, "rope: positions ",
              pos.shape_str(), " for x ", x.shape_str());
  const int32_t* positions = pos.i32();
  const int half = head_dim / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
  float* base = x.f32();
  const int64_t rows = x.size(0);
#pragma omp parallel for schedule(static) if (rows * n_heads > 64)
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<float> c(half), s(half);
    for (int i = 0; i < half; ++i) {
      const float a = static_cast<float>(positions[t]) * inv_freq[i];
      c[i] = std::cos(a);
      s[i] = std::sin(a);
    }
    float* row = base + t * x.stride(0);
    for (int hd = 0; hd < n_heads; ++hd) {
      float* v = row + static_cast<int64_t>(hd) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c[i] - x2 * s[i];
        v[i + half] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

}  // namespace olmo2::ops
