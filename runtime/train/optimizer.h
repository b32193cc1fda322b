// Decoupled AdamW (Loshchilov & Hutter) exactly as torch.optim.AdamW computes it in
// fp32 on the CPU, plus the global gradient-norm clipping of the OLMo 2 recipe
// (docs/architecture.md §7). Fixture: tests/golden/make_adamw_fixtures.py.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "runtime/model/parameters.h"

namespace olmo2 {

/// Hyper-parameters of AdamW; defaults are the OLMo 2 recipe. The learning rate is not
/// here: it is passed to every step (it comes from an LrSchedule).
struct AdamWOptions {
  double beta1 = 0.9;         ///< first-moment decay, in [0, 1)
  double beta2 = 0.95;        ///< second-moment decay, in [0, 1)
  double eps = 1e-8;          ///< added to the bias-corrected sqrt of the second moment, ≥ 0
  double weight_decay = 0.1;  ///< decoupled decay, applied where Parameter::weight_decay, ≥ 0
};

/// AdamW over this rank's parameters: one exp_avg and one exp_avg_sq f32 tensor per
/// parameter, of the parameter's local shape, zero at the start.
///
/// One step with t = steps() after increment, for every element (value p, grad g,
/// moments m, v), in the order and precision of torch's `_single_tensor_adam`
/// (torch/optim/adam.py, decoupled_weight_decay=True, amsgrad=False, maximize=False,
/// non-foreach, lr a Python float) and its CPU kernels; "f(x)" is x rounded to fp32,
/// scalars in double unless rounded:
///   p = p · f(1 − lr·wd)                         (skipped when wd = 0; wd = 0 where
///                                                  Parameter::weight_decay is false)
///   m = fma(f(1 − β1), g − m, m)                 (torch lerp_, weight < ½; for
///                                                  weight ≥ ½ fma(f(1−β1) − 1, g − m, g))
///   v = fma(f(1 − β2)·g, g, v·f(β2))             (mul_ then addcmul_)
///   bc1 = 1 − β1^t, bc2 = 1 − β2^t               (double, pow as Python's **)
///   denom = sqrt(v) / f(bc2^0.5) + f(eps)
///   p = p + (f(−lr/bc1) · m) / denom              (addcdiv_)
/// Every element is independent, so the result does not depend on the thread count.
/// The one known difference from torch on the CPU: torch's sqrt goes through MKL's
/// vectorised sqrt, which is not always correctly rounded (1 ulp off for ~20% of
/// inputs on an AVX2 build); std::sqrt here is. Moments match torch bit for bit when
/// parameters do; parameters agree to a few fp32 ulps (tests/train/test_optimizer).
class AdamW {
 public:
  /// Allocates zero moments for every parameter of `params` (names must be unique).
  /// Throws InputError naming the value when an option is out of range (β outside
  /// [0, 1), eps or weight_decay negative or not finite) or a name repeats.
  AdamW(const std::vector<Parameter>& params, AdamWOptions options = {});

  /// One update of every parameter's value from its grad with learning rate `lr`
  /// (≥ 0, finite; InputError otherwise). `params` must be the list the optimizer was
  /// built with (same names, order and shapes; ShapeError otherwise). Grads are read,
  /// not cleared.
  void step(std::vector<Parameter>& params, double lr);

  /// Number of steps taken (torch's state["step"]); 0 before the first.
  int64_t steps() const { return steps_; }
  const AdamWOptions& options() const { return options_; }

  /// Views (f32, CPU, contiguous, the parameter's local shape) of every moment, named
  /// "exp_avg.<parameter name>" and "exp_avg_sq.<parameter name>" — what a checkpoint
  /// saves. The views alias the optimizer's memory and stay valid while it lives.
  std::map<std::string, TensorView> state_tensors() const;

  /// Copies saved moments back in and sets the step count to `steps`. `state` must hold
  /// an f32 contiguous tensor (any device) of the parameter's local shape for every name
  /// state_tensors() lists; other names are ignored unless they start with "exp_avg."
  /// or "exp_avg_sq." (a moment of a parameter this optimizer does not have). Throws
  /// InputError naming the missing, unexpected, mis-shaped or mis-typed tensor, or a
  /// negative `steps`; nothing is changed when it throws.
  void restore(const std::map<std::string, TensorView>& state, int64_t steps);

 private:
  AdamWOptions options_;
  std::vector<std::string> names_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  int64_t steps_ = 0;
};

/// Σ g² over every element of every parameter's grad of this rank, in double (summed in
/// fixed chunks, so the result does not depend on the thread count). With
/// `count_replicated` false, parameters with tp_replicated are skipped: under tensor
/// parallelism every rank holds the same copy of those, and one rank alone adds them
/// (docs/architecture.md §11.5). The global norm is sqrt of the sum of this over ranks. Padding
/// rows hold zero grads and add nothing.
double grad_norm_squared_local(const std::vector<Parameter>& params, bool count_replicated);

/// torch.nn.utils.clip_grad_norm_ given the global L2 norm `total_norm` of all grads:
/// coefficient c = max_norm / (total_norm + 1e-6); when c < 1 every grad is multiplied
/// by f32(c) (torch clamps c to 1 and multiplies; multiplying by 1 is a no-op).
/// Returns the coefficient applied, or 1.0 when none was. `max_norm` ≤ 0 disables
/// clipping (returns 1.0). A non-finite `total_norm` leaves the grads alone and returns
/// NaN (the caller's spike check decides about such a step). Throws InputError for a
/// negative `total_norm`.
double clip_grad_norm(std::vector<Parameter>& params, double total_norm, double max_norm);

}  // namespace olmo2
