#include "runtime/train/grad_sync.h"

#include <algorithm>

#include "core/error.h"
#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"
#include "runtime/train/overlapped_grad_sync.h"

namespace olmo2 {

void all_reduce_gradients(std::vector<Parameter>& params, parallel::Communicator& dp, int64_t bucket_bytes) {
  const Device device = params.empty() ? Device::CPU : params.front().grad->device();
  GradBuckets buckets(params, dp, bucket_bytes, 0, 1, false, device, /*unit_order=*/false);
  buckets.finish();
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
