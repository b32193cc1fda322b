#include "ops/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/backward.h"
#include "ops/cpu/checks.h"

#include <cmath>
#include <vector>

namespace olmo2::ops {

void cpu::rope(const TensorView& x, const TensorView& pos, int n_heads, int head_dim, const RopeFrequencies& f) {
  OLMO2_CHECK(x.dim() == 2 && x.size(1) == static_cast<int64_t>(n_heads) * head_dim &&
                  head_dim % 2 == 0 && x.stride(1) == 1,
              "rope: x ", x.shape_str(), " n_heads ", n_heads, " head_dim ", head_dim);
  OLMO2_CHECK(pos.dim() == 1 && pos.size(0) == x.size(0) && pos.stride(0) == 1, "rope: positions ",
              pos.shape_str(), " for x ", x.shape_str());
  OLMO2_CHECK(static_cast<int64_t>(f.inv_freq.size()) == head_dim / 2, "rope: ", f.inv_freq.size(),
              " inverse frequencies for head_dim ", head_dim, " (want ", head_dim / 2, ")");
  const int32_t* positions = pos.i32();
  const int half = head_dim / 2;
  const float* inv_freq = f.inv_freq.data();
  const float scaling = f.attention_scaling;
  float* base = x.f32();
  const int64_t rows = x.size(0);
#pragma omp parallel for schedule(static) if (rows * n_heads > 64)
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<float> c(half), s(half);
    for (int i = 0; i < half; ++i) {
      const float a = static_cast<float>(positions[t]) * inv_freq[i];
      // Each table entry times the scaling, rounded to f32 (exact for scaling 1).
      c[i] = std::cos(a) * scaling;
      s[i] = std::sin(a) * scaling;
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

void cpu::rope_backward(const TensorView& dy, const TensorView& positions, int n_heads, int head_dim,
                        const RopeFrequencies& f) {
  // The rotation by −a is the forward at position −p: (−p)·f = −(p·f) exactly in fp32,
  // and cos/sin are even/odd, so this reuses the forward's angles bit for bit; the
  // scaled sine f32(sin(−a)·s) = −f32(sin(a)·s) too (rounding is symmetric), so this is
  // s times the inverse rotation, the forward's transpose.
  const int64_t rows = dy.dim() == 2 ? dy.size(0) : 0;
  OLMO2_CHECK(positions.dim() == 1 && positions.size(0) == rows && positions.stride(0) == 1,
              "rope_backward: positions ", positions.shape_str(), " for dy ", dy.shape_str());
  std::vector<int32_t> negated(static_cast<size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) negated[static_cast<size_t>(t)] = -positions.i32()[t];
  cpu::rope(dy, TensorView(negated.data(), DType::I32, {rows}), n_heads, head_dim, f);
}

}  // namespace olmo2::ops
