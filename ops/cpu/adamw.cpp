// CPU AdamW update (ops/adamw.h).
#include "ops/adamw.h"

#include <cmath>

#include "ops/cpu/kernels.h"

namespace olmo2::ops {

void cpu::adamw_step(const TensorView& param, const TensorView& grad, const TensorView& exp_avg,
                     const TensorView& exp_avg_sq, const AdamWStep& s) {
  for (const TensorView* v : {&grad, &exp_avg, &exp_avg_sq}) {
    OLMO2_CHECK(v->shape() == param.shape() && v->is_contiguous() && v->dtype() == DType::F32, "adamw_step: ",
                v->shape_str(), " ", dtype_name(v->dtype()), " beside the parameter ", param.shape_str());
  }
  OLMO2_CHECK(param.is_contiguous() && param.dtype() == DType::F32, "adamw_step: parameter ", param.shape_str(), " ",
              dtype_name(param.dtype()));
  float* p = param.f32();
  const float* g = grad.f32();
  float* m = exp_avg.f32();
  float* v = exp_avg_sq.f32();
  const int64_t n = param.numel();
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    const float gi = g[i];
    if (s.decayed) pi = pi * s.decay;
    const float mi = m[i];
    // at::lerp: weight < 0.5 → self + w·(end − self), else end − (end − self)·(1 − w);
    // the AVX2 kernel evaluates both as one fused multiply-add.
    const float mn = s.w1_small ? std::fma(s.w1, gi - mi, mi) : std::fma(s.w1 - 1.0f, gi - mi, gi);
    // exp_avg_sq.mul_(β2).addcmul_(g, g, value=1−β2): self + (value·g)·g, fused.
    const float vn = std::fma(s.w2 * gi, gi, v[i] * s.beta2);
    const float denom = std::sqrt(vn) / s.bc2_sqrt + s.eps;
    // param.addcdiv_(exp_avg, denom, value=−step_size): self + (value·m)/denom.
    p[i] = pi + (s.neg_step * mn) / denom;
    m[i] = mn;
    v[i] = vn;
  }
}

}  // namespace olmo2::ops
