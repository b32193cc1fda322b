#include "runtime/train/zero_shards.h"

#include <algorithm>

#include "core/error.h"
#include "ops/tensor_ops.h"
#include "runtime/train/zero_startup.h"

namespace olmo2 {

ZeroShards::ZeroShards(DataParallelAdamW& optimizer, std::vector<Parameter>& params, std::vector<Tensor*> compute,
                       parallel::Communicator& dp, size_t layers, int64_t bucket_bytes, bool overlap)
    : optimizer_(optimizer), overlap_(overlap), params_(params), compute_(std::move(compute)), dp_(dp), bucket_bytes_(bucket_bytes) {
  OLMO2_CHECK(bucket_bytes_ > 0, "ZeRO reduce-scatter bucket of ", bucket_bytes_, " bytes");
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

void ZeroShards::count(const Tensor& t, int sign) {
  live_ += sign * t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  peak_ = std::max(peak_, live_);
}

void ZeroShards::allocate(Tensor& t) {
  t = Tensor::zeros(t.shape(), t.dtype(), t.device());
  count(t, +1);
}

void ZeroShards::release(Tensor& t) {
  if (t.empty()) return;
  count(t, -1);
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

int ZeroShards::next_unit(int unit, bool forward) const {
  const int step = forward ? 1 : -1, hooks = static_cast<int>(unit_of_hook_.size());
  // Hook 0, the embedding, is never next: first in the forward, no weights in the backward.
  for (int h = unit + step; h >= 1 && h < hooks; h += step) {
    if (unit_of_hook_[static_cast<size_t>(h)] >= 0) return unit_of_hook_[static_cast<size_t>(h)];
  }
  return -1;
}

void ZeroShards::lay_out(size_t u, const Tensor& flat, bool grads) {
  const ZeroUnit& z = optimizer_.units()[u];
  int64_t at = 0;
  for (size_t i = z.first; i < z.last; ++i) {
    Tensor& t = grads ? *params_[i].grad : *compute_[i];
    Tensor piece;  // a view: `flat` owns the storage
    piece.view() = flat.view().rows(at, at + t.numel()).reshape(t.shape());
    at += t.numel();
    t = std::move(piece);
  }
}

void ZeroShards::unlay(size_t u, bool grads) {
  const ZeroUnit& z = optimizer_.units()[u];
  for (size_t i = z.first; i < z.last; ++i) {
    Tensor& t = grads ? *params_[i].grad : *compute_[i];
    t = shape_only(t.shape(), t.dtype(), t.device());
  }
}

bool ZeroShards::post(size_t u) {
  if (gathered_[u] || in_flight_.count(u)) return false;
  const ZeroUnit& unit = optimizer_.units()[u];
  const DType dt = compute_[unit.first]->dtype();  // the compute dtype: bf16 precision gathers bf16
  InFlight f{Tensor::zeros({unit.chunk}, dt, device_), Tensor::zeros({unit.chunk * dp_.size()}, dt, device_), {}};
  optimizer_.pack_values(u, f.mine.view());
  f.handle = dp_.all_gather_start(f.mine.view(), f.all.view());  // the buffers stay put when f moves
  count(f.all, +1);
  sent_ += f.all.numel() * static_cast<int64_t>(dtype_size(dt));
  peak_units_ = std::max(peak_units_, ++units_now_);
  in_flight_.emplace(u, std::move(f));
  return true;
}

void ZeroShards::gather(size_t u) {
  if (gathered_[u]) return;
  post(u);
  auto it = in_flight_.find(u);
  it->second.handle.wait();
  // The gathered whole is the unit's weights: its tensors become views of it (the unit's
  // flat order is its parameters' order, the padding past its end unused).
  whole_weights_[u] = std::move(it->second.all);
  in_flight_.erase(it);
  lay_out(u, whole_weights_[u], false);
  gathered_[u] = true;
}

void ZeroShards::release_weights(size_t u) {
  if (optimizer_.stage() < 3 || !gathered_[u]) return;
  unlay(u, false);
  count(whole_weights_[u], -1);
  whole_weights_.erase(u);
  gathered_[u] = false;
  --units_now_;
}

void ZeroShards::before_forward(int unit) {
  const int u = unit_of(unit);
  if (u < 0) return;
  gather(static_cast<size_t>(u));
  const int next = next_unit(unit, true);
  if (next >= 0 && post(static_cast<size_t>(next))) ++prefetched_;
}

void ZeroShards::after_forward(int unit) {
  const int u = unit_of(unit);
  if (u >= 0) release_weights(static_cast<size_t>(u));
}

void ZeroShards::before_backward(int unit) {
  const int u = unit_of(unit);
  if (u < 0) return;
  if (unit != 0) gather(static_cast<size_t>(u));  // the embedding's backward reads no weights
  // The unit's gradient, flat and padded to dp chunks (zeros past its end), is what the
  // reduce-scatter after its backward sends; its tensors are views of it.
  const ZeroUnit& z = optimizer_.units()[static_cast<size_t>(u)];
  Tensor& flat = whole_grads_[static_cast<size_t>(u)] = Tensor::zeros({z.chunk * dp_.size()}, DType::F32, device_);
  count(flat, +1);
  lay_out(static_cast<size_t>(u), flat, true);
  if (unit == 0) return;
  const int next = next_unit(unit, false);
  if (next >= 0 && post(static_cast<size_t>(next))) ++prefetched_;
}

void ZeroShards::after_backward(int unit) {
  const int u = unit_of(unit);
  if (u < 0) return;
  const size_t unit_index = static_cast<size_t>(u);
  Tensor whole = std::move(whole_grads_.at(unit_index));
  whole_grads_.erase(unit_index);
  unlay(unit_index, true);
  sent_ += whole.numel() * 4;
  reduce_scatter_grad(unit_index, std::move(whole));
  // With overlap the unit's last piece stays in flight through the next unit's backward.
  if (!overlap_) complete(reducing_.size());
  release_weights(unit_index);
}

void ZeroShards::finish() { complete(reducing_.size()); }

void ZeroShards::reduce_scatter_grad(size_t u, Tensor grad) {
  // Reduce-scattered: this rank gets the sum over DP of its chunk of the unit's gradient
  // (docs/architecture.md §7 "ZeRO stages"), in pieces whose [dp, piece] send buffer fits
  // the bucket, so neither this rank's received piece nor the transport's temporaries
  // (Open MPI's non-blocking reduce-scatter holds whole-message copies on the ranks that
  // reduce) grow with the unit. Each element's sum is the same in every piece size.
  const int64_t chunk = optimizer_.units()[u].chunk, d = dp_.size();
  const int64_t piece = std::clamp<int64_t>(bucket_bytes_ / (4 * d), 1, chunk);
  const auto held = std::make_shared<Tensor>(std::move(grad));
  const Tensor& whole = *held;
  // At most one piece in flight before this one is posted (without overlap none), so that
  // the transport's temporaries stay those of two pieces, not of the whole unit.
  const size_t keep = overlap_ ? 1 : 0;
  for (int64_t at = 0; at < chunk; at += piece) {
    const int64_t n = std::min(piece, chunk - at);
    if (reducing_.size() > keep) complete(reducing_.size() - keep);
    Reducing r{u, at, n, held, Tensor(), Tensor::zeros({n}, DType::F32, device_), {}};
    TensorView in = whole.view();
    if (piece < chunk) {  // rank r's part of this piece: its chunk's elements [at, at + n)
      r.send = Tensor::zeros({n * d}, DType::F32, device_);
      in = r.send.view();
      for (int64_t k = 0; k < d; ++k) ops::copy(whole.view().rows(k * chunk + at, k * chunk + at + n), in.rows(k * n, k * n + n));
    }
    r.handle = dp_.reduce_scatter_start(in, r.mine.view(), parallel::ReduceOp::Sum);
    reducing_.push_back(std::move(r));
  }
}

void ZeroShards::complete(size_t pieces) {
  for (; pieces > 0; --pieces) {
    Reducing& r = reducing_.front();
    r.handle.wait();
    optimizer_.add_grad_chunk(r.unit, r.mine.view(), r.at);
    if (r.whole.use_count() == 1) count(*r.whole, -1);  // the unit's last piece
    reducing_.pop_front();
  }
}

}  // namespace olmo2
