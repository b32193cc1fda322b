#include "runtime/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "core/error.h"
#include "ops/adamw.h"
#include "ops/tensor_ops.h"

namespace olmo2 {
namespace {

void check_options(const AdamWOptions& o) {
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0)) OLMO2_THROW(InputError, "AdamW beta1 ", o.beta1, " must be in [0, 1)");
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0)) OLMO2_THROW(InputError, "AdamW beta2 ", o.beta2, " must be in [0, 1)");
  if (!(o.eps >= 0.0) || !std::isfinite(o.eps)) OLMO2_THROW(InputError, "AdamW eps ", o.eps, " must be a finite number >= 0");
  if (!(o.weight_decay >= 0.0) || !std::isfinite(o.weight_decay)) {
    OLMO2_THROW(InputError, "AdamW weight decay ", o.weight_decay, " must be a finite number >= 0");
  }
}

}  // namespace

AdamW::AdamW(const std::vector<Parameter>& params, AdamWOptions options) : options_(options) {
  check_options(options_);
  std::set<std::string> seen;
  for (const Parameter& p : params) {
    if (!seen.insert(p.name).second) OLMO2_THROW(InputError, "AdamW: parameter ", p.name, " listed twice");
    OLMO2_CHECK(p.value != nullptr && p.grad != nullptr, "parameter ", p.name, " has no value or grad");
    names_.push_back(p.name);
    // The moments live beside the parameter (on its device).
    exp_avg_.push_back(Tensor::zeros(p.value->shape(), DType::F32, p.value->device()));
    exp_avg_sq_.push_back(Tensor::zeros(p.value->shape(), DType::F32, p.value->device()));
  }
}

void AdamW::step(std::vector<Parameter>& params, double lr) {
  if (!(lr >= 0.0) || !std::isfinite(lr)) OLMO2_THROW(InputError, "learning rate ", lr, " must be a finite number >= 0");
  OLMO2_CHECK(params.size() == names_.size(), "AdamW built for ", names_.size(), " parameters, stepped with ",
              params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    const Parameter& p = params[k];
    OLMO2_CHECK(p.name == names_[k], "parameter ", k, " is ", p.name, ", AdamW expected ", names_[k]);
    OLMO2_CHECK(p.value->shape() == exp_avg_[k].shape() && p.grad->shape() == exp_avg_[k].shape(),
                "parameter ", p.name, " value ", shape_to_string(p.value->shape()), " grad ",
                shape_to_string(p.grad->shape()), " vs moments ", shape_to_string(exp_avg_[k].shape()));
  }
  ++steps_;
  const AdamWOptions& o = options_;
  const double t = static_cast<double>(steps_);
  const double bc1 = 1.0 - std::pow(o.beta1, t);
  const double bc2 = 1.0 - std::pow(o.beta2, t);
  const double step_size = lr / bc1;
  const double bc2_sqrt = std::pow(bc2, 0.5);  // Python's bc2 ** 0.5
  const double w1 = 1.0 - o.beta1;
  for (size_t k = 0; k < params.size(); ++k) {
    Parameter& p = params[k];
    const double wd = p.weight_decay ? o.weight_decay : 0.0;
    const ops::AdamWStep s{static_cast<float>(1.0 - lr * wd), wd != 0.0, static_cast<float>(w1), std::fabs(w1) < 0.5,
                           static_cast<float>(o.beta2), static_cast<float>(1.0 - o.beta2),
                           static_cast<float>(bc2_sqrt), static_cast<float>(o.eps), static_cast<float>(-step_size)};
    ops::adamw_step(p.value->view(), p.grad->view(), exp_avg_[k].view(), exp_avg_sq_[k].view(), s);
  }
}

std::map<std::string, TensorView> AdamW::state_tensors() const {
  std::map<std::string, TensorView> out;
  for (size_t k = 0; k < names_.size(); ++k) {
    out.emplace("exp_avg." + names_[k], exp_avg_[k].view());
    out.emplace("exp_avg_sq." + names_[k], exp_avg_sq_[k].view());
  }
  return out;
}

void AdamW::restore(const std::map<std::string, TensorView>& state, int64_t steps) {
  if (steps < 0) OLMO2_THROW(InputError, "optimizer step count ", steps, " must be >= 0");
  const std::map<std::string, TensorView> mine = state_tensors();
  for (const auto& [name, src] : state) {
    if ((name.starts_with("exp_avg.") || name.starts_with("exp_avg_sq.")) && !mine.count(name)) {
      OLMO2_THROW(InputError, "optimizer state has ", name, ", a moment of no parameter of this model/shard");
    }
  }
  for (const auto& [name, dst] : mine) {
    auto it = state.find(name);
    if (it == state.end()) OLMO2_THROW(InputError, "optimizer state has no tensor ", name);
    const TensorView& src = it->second;
    if (src.dtype() != DType::F32 || !src.is_contiguous() || src.empty()) {
      OLMO2_THROW(InputError, "optimizer state tensor ", name, " must be a contiguous f32 tensor, got ",
                  dtype_name(src.dtype()));
    }
    if (src.shape() != dst.shape()) {
      OLMO2_THROW(InputError, "optimizer state tensor ", name, " has shape ", src.shape_str(), ", expected ",
                  dst.shape_str());
    }
  }
  for (const auto& [name, dst] : mine) ops::copy(state.at(name), dst);
  steps_ = steps;
}

double grad_norm_squared_local(const std::vector<Parameter>& params, bool count_replicated) {
  double total = 0.0;
  for (const Parameter& p : params) {
    if (p.tp_replicated && !count_replicated) continue;
    total = ops::sum_squares(p.grad->view(), total);
  }
  return total;
}

double clip_grad_norm(std::vector<Parameter>& params, double total_norm, double max_norm) {
  if (total_norm < 0.0) OLMO2_THROW(InputError, "gradient norm ", total_norm, " is negative");
  if (!(max_norm > 0.0)) return 1.0;
  if (!std::isfinite(total_norm)) return std::numeric_limits<double>::quiet_NaN();
  const double coef = max_norm / (total_norm + 1e-6);
  if (!(coef < 1.0)) return 1.0;
  for (Parameter& p : params) ops::scale(p.grad->view(), static_cast<float>(coef));
  return coef;
}

}  // namespace olmo2
