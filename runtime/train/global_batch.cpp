#include "runtime/train/global_batch.h"

#include <cmath>

#include "runtime/train/grad_sync.h"

namespace olmo2 {

LossSums global_batch_forward_backward(const Olmo2Model& model, std::vector<Parameter>& params, ModelWeights& grads,
                                       const std::vector<std::vector<Sample>>& micro_batches, float z_coef,
                                       double loss_scale, const TrainContext& ctx,
                                       const std::function<void(LossSums&)>& inject) {
  int64_t local = 0;
  for (const auto& mb : micro_batches) local += count_targets(mb);
  std::vector<double> count{static_cast<double>(local)};
  all_reduce_doubles(ctx.dp, count);
  LossSums sums;
  const int64_t total = std::llround(count[0]);
  if (total > 0) {
    const float scale = static_cast<float>(loss_scale / static_cast<double>(total));
    sums = pipeline_forward_backward(model, grads, micro_batches, z_coef, scale, 512, ParallelContext{ctx.tp, ctx.pp},
                                     nullptr, ctx.diag);
  }
  if (inject) inject(sums);
  if (ctx.dp) all_reduce_gradients(params, *ctx.dp, ctx.bucket_bytes);
  if (ctx.tp) sum_kv_replica_gradients(params, *ctx.tp);
  std::vector<double> v{sums.ce_sum, sums.z_sq_sum};  // the last stage holds them; others add zeros
  all_reduce_doubles(ctx.dp, v);
  all_reduce_doubles(ctx.pp, v);
  return LossSums{v[0], v[1], total};
}

}  // namespace olmo2
