#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/backward.h"
#include "ops/cpu/checks.h"
#include "ops/op_checks.h"

#include <cmath>

namespace olmo2::ops {

namespace {
void check_same(const TensorView& a, const TensorView& b, const char* what) { elementwise_check_same(a, b, what); }
}  // namespace

void cpu::swiglu(const TensorView& gate, const TensorView& up, const TensorView& out, DType act) {
  check_same(gate, up, "swiglu");
  check_same(gate, out, "swiglu");
  const int64_t rows = gate.size(0), cols = gate.size(1);
  const bool bf = act == DType::BF16;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float* g = gate.f32() + t * gate.stride(0);
    const float* u = up.f32() + t * up.stride(0);
    float* o = out.f32() + t * out.stride(0);
    for (int64_t i = 0; i < cols; ++i) {
      float s = g[i] / (1.0f + std::exp(-g[i]));
      if (bf) s = round_bf16(s);
      const float p = s * u[i];
      o[i] = bf ? round_bf16(p) : p;
    }
  }
}

void cpu::add_inplace(const TensorView& y, const TensorView& x, DType act) {
  check_same(y, x, "add");
  const int64_t rows = y.size(0), cols = y.size(1);
  const bool bf = act == DType::BF16;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    float* yr = y.f32() + t * y.stride(0);
    const float* xr = x.f32() + t * x.stride(0);
    for (int64_t i = 0; i < cols; ++i) {
      const float s = yr[i] + xr[i];
      yr[i] = bf ? round_bf16(s) : s;
    }
  }
}

void cpu::swiglu_backward(const TensorView& gate, const TensorView& up, const TensorView& dout,
                     const TensorView& dgate, const TensorView& dup) {
  detail::check_cpu_rows(gate, "swiglu_backward", "gate");
  detail::check_cpu_same(gate, up, "swiglu_backward", "up");
  detail::check_cpu_same(gate, dout, "swiglu_backward", "dout");
  detail::check_cpu_same(gate, dgate, "swiglu_backward", "dgate");
  detail::check_cpu_same(gate, dup, "swiglu_backward", "dup");
  const int64_t rows = gate.size(0), cols = gate.size(1);
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float* g = gate.f32() + t * gate.stride(0);
    const float* u = up.f32() + t * up.stride(0);
    const float* d = dout.f32() + t * dout.stride(0);
    float* dg = dgate.f32() + t * dgate.stride(0);
    float* du = dup.f32() + t * dup.stride(0);
    for (int64_t i = 0; i < cols; ++i) {
      const float gi = g[i], ui = u[i], di = d[i];
      const float sig = 1.0f / (1.0f + std::exp(-gi));
      const float silu = gi * sig;
      dg[i] = di * ui * sig * (1.0f + gi * (1.0f - sig));
      du[i] = di * silu;
    }
  }
}

}  // namespace olmo2::ops
