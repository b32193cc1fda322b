// The AdamW update of one parameter tensor, element-wise, exactly as torch computes it.
#pragma once

#include "ops/tensor.h"

namespace olmo2::ops {

/// The scalars of one AdamW step, computed once per step by the optimizer (in double,
/// then rounded to fp32 as torch rounds them): see runtime/train/optimizer.h.
struct AdamWStep {
  float decay = 1.0f;      ///< f(1 − lr·wd)
  bool decayed = false;    ///< wd ≠ 0 for this parameter
  float w1 = 0.1f;         ///< f(1 − β1)
  bool w1_small = true;    ///< |1 − β1| < ½ (which form of lerp torch evaluates)
  float beta2 = 0.95f;     ///< f(β2)
  float w2 = 0.05f;        ///< f(1 − β2)
  float bc2_sqrt = 1.0f;   ///< f((1 − β2^t)^½)
  float eps = 1e-8f;       ///< f(eps)
  float neg_step = 0.0f;   ///< f(−lr / (1 − β1^t))
};

/// One decoupled-AdamW update of every element, in place, in the order and precision of
/// torch's `_single_tensor_adam` (decoupled weight decay, no amsgrad) on the CPU:
///   p = p·decay (when decayed);  m = lerp(m, g, w1) (one fused multiply-add);
///   v = fma(w2·g, g, v·β2);  p = p + (neg_step·m) / (sqrt(v)/bc2_sqrt + eps).
/// param, grad, exp_avg, exp_avg_sq: f32 views of one shape, contiguous. Every element is
/// independent: the result does not depend on the thread count. ShapeError on
/// mismatched views. Source: Loshchilov & Hutter, "Decoupled Weight Decay
/// Regularization" (ICLR 2019); torch/optim/adam.py.
void adamw_step(const TensorView& param, const TensorView& grad, const TensorView& exp_avg,
                const TensorView& exp_avg_sq, const AdamWStep& step);

}  // namespace olmo2::ops
