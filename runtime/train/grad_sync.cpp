#include "runtime/train/grad_sync.h"

#include <algorithm>

#include "core/error.h"
#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"

namespace olmo2 {

namespace {
/// Elements [begin, begin + count) of a tensor, flattened.
TensorView flat(const TensorView& t, int64_t begin, int64_t count) {
  return t.reshape({t.numel()}).rows(begin, begin + count);
}
}  // namespace

void all_reduce_gradients(std::vector<Parameter>& params, parallel::Communicator& dp, int64_t bucket_bytes) {
  if (bucket_bytes < 4) OLMO2_THROW(InputError, "gradient bucket of ", bucket_bytes, " bytes holds no float");
  if (dp.size() == 1 || params.empty()) return;
  const int64_t cap = bucket_bytes / 4;
  int64_t total = 0;
  for (const Parameter& p : params) total += p.grad->numel();
  const Tensor bucket = Tensor::zeros({std::min(cap, total)}, DType::F32, params.front().grad->device());
  // The pieces of gradients in the bucket being filled: (where in the bucket, which gradient elements).
  std::vector<std::pair<int64_t, TensorView>> pieces;
  int64_t used = 0;
  auto flush = [&] {
    if (used == 0) return;
    parallel::all_reduce_sum(dp, bucket.view().rows(0, used));
    for (const auto& [at, grad] : pieces) ops::copy(bucket.view().rows(at, at + grad.numel()), grad);
    pieces.clear();
    used = 0;
  };
  for (Parameter& p : params) {
    for (int64_t done = 0; done < p.grad->numel();) {
      const int64_t take = std::min(p.grad->numel() - done, cap - used);
      const TensorView piece = flat(p.grad->view(), done, take);
      ops::copy(piece, bucket.view().rows(used, used + take));
      pieces.emplace_back(used, piece);
      used += take, done += take;
      if (used == cap) flush();
    }
  }
  flush();
}

void all_reduce_doubles(parallel::Communicator* c, std::vector<double>& v) {
  if (!c || c->size() == 1) return;
  c->all_reduce_sum(v);
}

void sum_kv_replica_gradients(std::vector<Parameter>& params, parallel::Communicator& tp) {
  // Layout: per replicated parameter (in list order, the same on every rank of the TP
  // group), a slot of its full size; this rank writes its slice at its offset.
  std::vector<std::pair<Parameter*, int64_t>> slots;  // parameter, offset of its full tensor
  int64_t total = 0;
  for (Parameter& p : params) {
    if (p.kv_replicas <= 1) continue;
    int64_t full = 1;
    for (int64_t d : p.full_shape) full *= d;
    slots.emplace_back(&p, total);
    total += full;
  }
  if (slots.empty() || tp.size() == 1) return;
  const Tensor buf = Tensor::zeros({total}, DType::F32, slots.front().first->grad->device());
  auto slot = [&](const Parameter& p, int64_t off) {  // k/v rows and k_norm elements: a contiguous row range
    const int64_t row = p.full_shape.size() == 2 ? p.full_shape[1] : 1;
    return buf.view().rows(off + p.shard_begin * row, off + p.shard_begin * row + p.numel());
  };
  for (auto& [p, off] : slots) ops::copy(p->grad->view().reshape({p->numel()}), slot(*p, off));
  parallel::all_reduce_sum(tp, buf.view());
  for (auto& [p, off] : slots) ops::copy(slot(*p, off), p->grad->view().reshape({p->numel()}));
}

}  // namespace olmo2
