#include "runtime/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "core/error.h"

namespace olmo2 {
namespace {

// Elements per OpenMP task below which a loop runs on one thread.
constexpr int64_t kParallelMin = 1 << 15;

void check_options(const AdamWOptions& o) {
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0)) OLMO2_THROW(InputError, "AdamW beta1 ", o.beta1, " must be in [0, 1)");
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0)) OLMO2_THROW(InputError, "AdamW beta2 ", o.beta2, " must be in [0, 1)");
  if (!(o.eps >= 0.0) || !std::isfinite(o.eps)) OLMO2_THROW(InputError, "AdamW eps ", o.eps, " must be a finite number >= 0");
  if (!(o.weight_decay >= 0.0) || !std::isfinite(o.weight_decay)) {
    OLMO2_THROW(InputError, "AdamW weight decay ", o.weight_decay, " must be a finite number >= 0");
  }
}

// One AdamW update of n elements (see the class comment for the formulas).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float decay, bool decayed,
                  float w1, bool w1_small, float b2, float w2, float bc2_sqrt, float eps, float neg_step) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    const float gi = g[i];
    if (decayed) pi = pi * decay;
    const float mi = m[i];
    // at::lerp: weight < 0.5 → self + w·(end − self), else end − (end − self)·(1 − w);
    // the AVX2 kernel evaluates both as one fused multiply-add.
    const float mn = w1_small ? std::fma(w1, gi - mi, mi) : std::fma(w1 - 1.0f, gi - mi, gi);
    // exp_avg_sq.mul_(β2).addcmul_(g, g, value=1−β2): self + (value·g)·g, fused.
    const float vn = std::fma(w2 * gi, gi, v[i] * b2);
    const float denom = std::sqrt(vn) / bc2_sqrt + eps;
    // param.addcdiv_(exp_avg, denom, value=−step_size): self + (value·m)/denom.
    p[i] = pi + (neg_step * mn) / denom;
    m[i] = mn;
    v[i] = vn;
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
    exp_avg_.push_back(Tensor::zeros(p.value->shape()));
    exp_avg_sq_.push_back(Tensor::zeros(p.value->shape()));
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
    adamw_update(p.value->f32(), p.grad->f32(), exp_avg_[k].f32(), exp_avg_sq_[k].f32(), p.numel(),
                 static_cast<float>(1.0 - lr * wd), wd != 0.0, static_cast<float>(w1), std::fabs(w1) < 0.5,
                 static_cast<float>(o.beta2), static_cast<float>(1.0 - o.beta2), static_cast<float>(bc2_sqrt),
                 static_cast<float>(o.eps), static_cast<float>(-step_size));
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
    if (src.dtype() != DType::F32 || src.device() != Device::CPU || !src.is_contiguous() || src.empty()) {
      OLMO2_THROW(InputError, "optimizer state tensor ", name, " must be a contiguous f32 CPU tensor, got ",
                  dtype_name(src.dtype()));
    }
    if (src.shape() != dst.shape()) {
      OLMO2_THROW(InputError, "optimizer state tensor ", name, " has shape ", src.shape_str(), ", expected ",
                  dst.shape_str());
    }
  }
  for (const auto& [name, dst] : mine) std::memcpy(dst.data(), state.at(name).data(), dst.bytes());
  steps_ = steps;
}

double grad_norm_squared_local(const std::vector<Parameter>& params, bool count_replicated) {
  constexpr int64_t kChunk = 1 << 14;
  double total = 0.0;
  std::vector<double> partial;
  for (const Parameter& p : params) {
    if (p.tp_replicated && !count_replicated) continue;
    const float* g = p.grad->f32();
    const int64_t n = p.grad->numel();
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    partial.assign(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      double s = 0.0;
      const int64_t end = std::min(n, (c + 1) * kChunk);
      for (int64_t i = c * kChunk; i < end; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
      partial[static_cast<size_t>(c)] = s;
    }
    for (double s : partial) total += s;
  }
  return total;
}

double clip_grad_norm(std::vector<Parameter>& params, double total_norm, double max_norm) {
  if (total_norm < 0.0) OLMO2_THROW(InputError, "gradient norm ", total_norm, " is negative");
  if (!(max_norm > 0.0)) return 1.0;
  if (!std::isfinite(total_norm)) return std::numeric_limits<double>::quiet_NaN();
  const double coef = max_norm / (total_norm + 1e-6);
  if (!(coef < 1.0)) return 1.0;
  const float c = static_cast<float>(coef);
  for (Parameter& p : params) {
    float* g = p.grad->f32();
    const int64_t n = p.grad->numel();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) g[i] *= c;
  }
  return coef;
}

}  // namespace olmo2
