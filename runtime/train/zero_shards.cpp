#include "runtime/train/zero_shards.h"

#include <algorithm>

#include "core/error.h"
#include "ops/tensor_ops.h"
#include "runtime/train/zero_startup.h"

namespace olmo2 {

ZeroShards::ZeroShards(DataParallelAdamW& optimizer, std::vector<Parameter>& params, std::vector<Tensor*> compute,
                       parallel::Communicator& dp, size_t layers)
    : optimizer_(optimizer), params_(params), compute_(std::move(compute)), dp_(dp) {
  OLMO2_CHECK(optimizer_.stage() >= 2, "ZeroShards needs ZeRO stage 2 or 3, the optimizer is at ", optimizer_.stage());
  OLMO2_CHECK(compute_.size() == params_.size(), compute_.size(), " compute tensors for ", params_.size(), " parameters");
  device_ = params_.empty() ? Device::CPU : params_.front().value->device();
  unit_of_hook_.assign(layers + 2, -1);
  const std::vector<ZeroUnit>& units = optimizer_.units();
  int next_layer = 1;
  for (size_t u = 0; u < units.size(); ++u) {
    const int kind = zero_unit_kind(params_[units[u].first].name);
    const size_t hook = kind == -1 ? 0 : kind == -2 ? layers + 1 : static_cast<size_t>(next_layer++);
    OLMO2_CHECK(hook < unit_of_hook_.size(), "unit ", u, " past the rank's ", layers, " layers");
    unit_of_hook_[hook] = static_cast<int>(u);
  }
  gathered_.assign(units.size(), optimizer_.stage() < 3);
}

int ZeroShards::unit_of(int unit) const {
  OLMO2_CHECK(unit >= 0 && static_cast<size_t>(unit) < unit_of_hook_.size(), "unit ", unit);
  return unit_of_hook_[static_cast<size_t>(unit)];
}

void ZeroShards::allocate(Tensor& t) {
  t = Tensor::zeros(t.shape(), t.dtype(), t.device());
  live_ += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  peak_ = std::max(peak_, live_);
}

void ZeroShards::release(Tensor& t) {
  if (t.empty()) return;
  live_ -= t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  t = shape_only(t.shape(), t.dtype(), t.device());
}

void ZeroShards::fill_master(const std::function<void(const Parameter&)>& fill) {
  OLMO2_CHECK(optimizer_.stage() == 3, "fill_master at ZeRO stage ", optimizer_.stage());
  for (size_t u = 0; u < optimizer_.units().size(); ++u) {
    const ZeroUnit& unit = optimizer_.units()[u];
    for (size_t i = unit.first; i < unit.last; ++i) {
      allocate(*params_[i].value);  // bf16 precision: the f32 master (fp32: the compute tensor itself)
      fill(params_[i]);
    }
    optimizer_.set_master(u);
    for (size_t i = unit.first; i < unit.last; ++i) release(*params_[i].value);
  }
}

void ZeroShards::gather(size_t u) {
  if (gathered_[u]) return;
  const ZeroUnit& unit = optimizer_.units()[u];
  const DType dt = compute_[unit.first]->dtype();  // the compute dtype: bf16 precision gathers bf16
  const Tensor mine = Tensor::zeros({unit.chunk}, dt, device_);
  optimizer_.pack_values(u, mine.view());
  const Tensor all = Tensor::zeros({unit.chunk * dp_.size()}, dt, device_);
  dp_.all_gather(mine.view(), all.view());
  sent_ += all.numel() * static_cast<int64_t>(dtype_size(dt));
  int64_t at = 0;
  for (size_t i = unit.first; i < unit.last; ++i) {
    Tensor& t = *compute_[i];
    allocate(t);
    ops::copy(all.view().rows(at, at + t.numel()), t.view().reshape({t.numel()}));
    at += t.numel();
  }
  gathered_[u] = true;
}

void ZeroShards::release_weights(size_t u) {
  if (optimizer_.stage() < 3 || !gathered_[u]) return;
  const ZeroUnit& unit = optimizer_.units()[u];
  for (size_t i = unit.first; i < unit.last; ++i) release(*compute_[i]);
  gathered_[u] = false;
}

void ZeroShards::before_forward(int unit) {
  const int u = unit_of(unit);
  if (u >= 0) gather(static_cast<size_t>(u));
}

void ZeroShards::after_forward(int unit) {
  const int u = unit_of(unit);
  if (u >= 0) release_weights(static_cast<size_t>(u));
}

void ZeroShards::before_backward(int unit) {
  const int u = unit_of(unit);
  if (u < 0) return;
  if (unit != 0) gather(static_cast<size_t>(u));  // the embedding's backward reads no weights
  const ZeroUnit& z = optimizer_.units()[static_cast<size_t>(u)];
  for (size_t i = z.first; i < z.last; ++i) allocate(*params_[i].grad);
}

void ZeroShards::after_backward(int unit) {
  const int u = unit_of(unit);
  if (u < 0) return;
  const ZeroUnit& z = optimizer_.units()[static_cast<size_t>(u)];
  // The unit's gradient, flat and padded to dp chunks, reduce-scattered: this rank gets
  // the sum over DP of its chunk (docs/architecture.md §7 "ZeRO stages").
  const Tensor whole = Tensor::zeros({z.chunk * dp_.size()}, DType::F32, device_);
  int64_t at = 0;
  for (size_t i = z.first; i < z.last; ++i) {
    Tensor& g = *params_[i].grad;
    ops::copy(g.view().reshape({g.numel()}), whole.view().rows(at, at + g.numel()));
    at += g.numel();
    release(g);
  }
  const Tensor mine = Tensor::zeros({z.chunk}, DType::F32, device_);
  dp_.reduce_scatter(whole.view(), mine.view(), parallel::ReduceOp::Sum);
  sent_ += whole.numel() * 4;
  optimizer_.add_grad_chunk(static_cast<size_t>(u), mine.view());
  release_weights(static_cast<size_t>(u));
}

}  // namespace olmo2
