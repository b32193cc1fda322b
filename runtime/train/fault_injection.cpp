#include "runtime/train/fault_injection.h"

#include <cmath>
#include <functional>
#include <string>

#include "core/error.h"
#include "ops/tensor_ops.h"

namespace olmo2 {

FaultInjection::FaultInjection(const TrainOptions& o)
    : scale_step_(o.debug_scale_step),
      scale_factor_(o.debug_scale_factor),
      scale_rank_(o.debug_scale_rank),
      stop_after_(o.debug_stop_after),
      grad_error_(o.debug_grad_error),
      grad_error_rank_(o.debug_grad_error_rank) {}

void FaultInjection::check_rank(int world) const {
  if (grad_error_ != 0.0 && (grad_error_rank_ < 0 || grad_error_rank_ >= world)) {
    OLMO2_THROW(InputError, "debug_grad_error_rank ", grad_error_rank_, " is not a rank of this job (", world,
                " ranks)");
  }
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
  if (grad_error_ != 0.0 && rank == grad_error_rank_) {
    const double error = grad_error_;
    inject = [error, &params, scaled = std::move(inject)](LossSums& s) {
      if (scaled) scaled(s);
      for (const Parameter& p : params) {
        float* g = p.grad->f32();
        if (error < 0) {  // a scale error: the whole shard × (1 + |error|)
          ops::scale(p.grad->view(), static_cast<float>(1.0 - error));
          continue;
        }
        double sq = 0;
        for (int64_t i = 0; i < p.numel(); ++i) sq += double(g[i]) * g[i];
        const double rms = std::sqrt(sq / static_cast<double>(std::max<int64_t>(p.numel(), 1)));
        const size_t salt = std::hash<std::string>{}(p.name);
        for (int64_t i = 0; i < p.numel(); ++i) {
          const size_t h = (salt ^ static_cast<size_t>(i)) * 0x9E3779B97F4A7C15ull;
          g[i] += static_cast<float>(((h >> 40) & 1 ? error : -error) * rms);
        }
      }
    };
  }
  return inject;
}

}  // namespace olmo2
