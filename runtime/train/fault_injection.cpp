#include "runtime/train/fault_injection.h"

#include "core/error.h"
#include "ops/tensor_ops.h"

namespace olmo2 {

FaultInjection::FaultInjection(const TrainOptions& o)
    : scale_step_(o.debug_scale_step),
      scale_factor_(o.debug_scale_factor),
      scale_rank_(o.debug_scale_rank),
      stop_after_(o.debug_stop_after) {}

void FaultInjection::check_rank(int world) const {
  if (scale_rank_ >= world) {
    OLMO2_THROW(InputError, "--debug-scale-rank ", scale_rank_, " is not a rank of this job (", world,
                " ranks)");
  }
}

double FaultInjection::loss_factor(int64_t step) const {
  const bool debug_step = step == scale_step_;
  return debug_step && scale_rank_ < 0 ? scale_factor_ : 1.0;
}

std::function<void(LossSums&)> FaultInjection::injection(int64_t step, int rank,
                                                         const std::vector<Parameter>& params) const {
  std::function<void(LossSums&)> inject;
  const bool debug_step = step == scale_step_;
  if (debug_step && scale_rank_ >= 0 && rank == scale_rank_) {
    const double factor = scale_factor_;
    inject = [factor, &params](LossSums& s) {  // this rank's local loss and gradients only
      s.ce_sum *= factor, s.z_sq_sum *= factor;
      for (const Parameter& p : params) ops::scale(p.grad->view(), static_cast<float>(factor));
    };
  }
  return inject;
}

}  // namespace olmo2
