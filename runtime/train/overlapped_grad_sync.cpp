#include "runtime/train/overlapped_grad_sync.h"

#include <algorithm>

#include "core/error.h"
#include "ops/device_runtime.h"
#include "ops/tensor_ops.h"
#include "runtime/train/zero_units.h"

namespace olmo2 {

namespace {
/// Elements [begin, begin + count) of a tensor, flattened.
TensorView flat(const TensorView& t, int64_t begin, int64_t count) {
  return t.reshape({t.numel()}).rows(begin, begin + count);
}

/// The parameter ranges of this rank's units with their hook unit (the embedding 0, layer
/// l 1 + l, the tail 1 + layers: UnitHooks), in the order the backward finishes them.
std::vector<std::pair<int, ZeroUnit>> backward_units(const std::vector<Parameter>& params, size_t layers) {
  std::vector<std::pair<int, ZeroUnit>> units;
  int next_layer = 1;
  for (ZeroUnit& u : make_zero_units(params, 2, 0, 1)) {
    const int kind = zero_unit_kind(params[u.first].name);
    const int hook = kind == -1 ? 0 : kind == -2 ? static_cast<int>(layers) + 1 : next_layer++;
    units.emplace_back(hook, std::move(u));
  }
  std::stable_sort(units.begin(), units.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return units;
}
}  // namespace

GradBuckets::GradBuckets(std::vector<Parameter>& params, parallel::Communicator& dp, int64_t bucket_bytes,
                         size_t layers, int64_t micro_batches, bool overlap, Device device, bool unit_order,
                         Tensor* storage)
    : dp_(dp), micro_batches_(micro_batches), overlap_(overlap), device_(device), storage_(storage) {
  if (bucket_bytes < 4) OLMO2_THROW(InputError, "gradient bucket of ", bucket_bytes, " bytes holds no float");
  OLMO2_CHECK(micro_batches >= 1, micro_batches, " micro-batches");
  if (dp.size() == 1 || params.empty()) return;
  std::vector<std::pair<int, ZeroUnit>> units;
  if (unit_order) {
    units = backward_units(params, layers);
  } else {
    units.emplace_back(-1, ZeroUnit{0, params.size(), 0, 0, {}});
  }
  buckets_of_unit_.resize(layers + 2);
  backwards_.assign(layers + 2, 0);
  const int64_t cap = bucket_bytes / 4;
  for (const auto& [hook, unit] : units) {
    for (size_t i = unit.first; i < unit.last; ++i) {
      const Parameter& p = params[i];
      for (int64_t done = 0; done < p.grad->numel();) {
        if (buckets_.empty() || buckets_.back().size == cap) {
          const int64_t end = buckets_.empty() ? 0 : buckets_.back().offset + buckets_.back().size;
          buckets_.emplace_back();
          buckets_.back().offset = end;
        }
        Bucket& b = buckets_.back();
        const int64_t take = std::min(p.grad->numel() - done, cap - b.size);
        b.pieces.push_back(Piece{b.size, flat(p.grad->view(), done, take)});
        b.size += take, done += take;
        if (hook < 0) continue;
        std::vector<size_t>& mine = buckets_of_unit_[static_cast<size_t>(hook)];
        if (mine.empty() || mine.back() != buckets_.size() - 1) {
          mine.push_back(buckets_.size() - 1);
          ++b.waiting;
        }
      }
    }
  }
}

void GradBuckets::post(size_t index) {
  if (!storage_) storage_ = &own_storage_;
  const int64_t total = buckets_.back().offset + buckets_.back().size;
  if (storage_->numel() < total || storage_->device() != device_) *storage_ = Tensor::zeros({total}, DType::F32, device_);
  Bucket& b = buckets_[index];
  b.posted = true;
  b.buffer = storage_->view().reshape({storage_->numel()}).rows(b.offset, b.offset + b.size);
  for (const Piece& p : b.pieces) ops::copy(p.grad, b.buffer.rows(p.at, p.at + p.grad.numel()));
  b.handle = dp_.all_reduce_start(b.buffer, parallel::ReduceOp::Sum, ops::default_stream(device_));
}

void GradBuckets::progress() {
  while (oldest_ < buckets_.size() && buckets_[oldest_].posted && buckets_[oldest_].handle.test()) ++oldest_;
  // One test of an incomplete request runs Open MPI's progress engine for all of them.
}

void GradBuckets::after_backward(int unit) {
  if (buckets_.empty()) return;
  OLMO2_CHECK(unit >= 0 && static_cast<size_t>(unit) < backwards_.size(), "unit ", unit);
  if (++backwards_[static_cast<size_t>(unit)] == micro_batches_) {
    for (size_t b : buckets_of_unit_[static_cast<size_t>(unit)]) {
      if (--buckets_[b].waiting == 0 && overlap_) {
        post(b);
        ++posted_early_;
      }
    }
  }
  progress();
}

void GradBuckets::finish() {
  if (!overlap_) {  // one buffer, one blocking all-reduce per bucket, in bucket order
    int64_t largest = 0;
    for (const Bucket& b : buckets_) largest = std::max(largest, b.size);
    const Tensor buffer = largest ? Tensor::zeros({largest}, DType::F32, device_) : Tensor();
    for (Bucket& b : buckets_) {
      const TensorView v = buffer.view().rows(0, b.size);
      for (const Piece& p : b.pieces) ops::copy(p.grad, v.rows(p.at, p.at + p.grad.numel()));
      dp_.all_reduce(v, parallel::ReduceOp::Sum, ops::default_stream(device_));
      for (const Piece& p : b.pieces) ops::copy(v.rows(p.at, p.at + p.grad.numel()), p.grad);
    }
    buckets_.clear();
    return;
  }
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (!buckets_[i].posted) post(i);
  }
  for (Bucket& b : buckets_) {
    b.handle.wait();
    for (const Piece& p : b.pieces) ops::copy(b.buffer.rows(p.at, p.at + p.grad.numel()), p.grad);
  }
  buckets_.clear();
}

}  // namespace olmo2
