#include "runtime/train/global_batch.h"

#include <optional>
#include <span>

#include "core/error.h"
#include "runtime/train/grad_sync.h"
#include "runtime/train/overlapped_grad_sync.h"

namespace olmo2 {

int64_t global_target_count(int64_t local, parallel::Communicator* dp) {
  if (!dp || dp->size() == 1) {
    if (local < 0) OLMO2_THROW(InputError, "target count ", local, " must be ≥ 0");
    return local;
  }
  // The count and a flag for a negative one, in one i64 all-reduce: a bad count on one
  // rank stops every rank of the group together (none is left waiting).
  int64_t v[2] = {local, local < 0 ? 1 : 0};
  dp->all_reduce_sum(std::span<int64_t>(v, 2));
  if (v[1] > 0) {
    OLMO2_THROW(InputError, "target count must be ≥ 0, but ", v[1], " rank(s) of group ", dp->name(),
                " have a negative one (this rank's: ", local, ")");
  }
  return v[0];
}

float loss_gradient_scale(double loss_scale, int64_t global_targets) {
  if (global_targets < 0) OLMO2_THROW(InputError, "global target count ", global_targets, " must be ≥ 0");
  if (global_targets == 0) return 0.0f;
  return static_cast<float>(loss_scale / static_cast<double>(global_targets));
}

LossSums global_batch_forward_backward(const Olmo2Model& model, std::vector<Parameter>& params, ModelWeights& grads,
                                       const std::vector<std::vector<Sample>>& micro_batches, float z_coef,
                                       double loss_scale, const TrainContext& ctx,
                                       const std::function<void(LossSums&)>& inject) {
  int64_t local = 0;
  for (const auto& mb : micro_batches) local += count_targets(mb);
  const int64_t total = global_target_count(local, ctx.dp);
  OLMO2_CHECK(static_cast<size_t>(ctx.pp_virtual) == model.shard().chunks.size(), "--pp-virtual ", ctx.pp_virtual,
              " but the model holds ", model.shard().chunks.size(), " chunks");
  LossSums sums;
  // ZeRO 0 and 1: the DP buckets are the step's hooks (docs/architecture.md §7 "Overlap").
  // Posting early or late is a local choice: the same buckets go in the same order.
  std::optional<GradBuckets> buckets;
  if (ctx.dp && ctx.dp->size() > 1 && !ctx.hooks) {
    const Device device = params.empty() ? weights_device(model) : params.front().grad->device();
    buckets.emplace(params, *ctx.dp, ctx.bucket_bytes, model.weights().layers.size(),
                    static_cast<int64_t>(micro_batches.size()), ctx.overlap && !inject, device, true,
                    ctx.bucket_storage);
  }
  if (total > 0) {
    const float scale = loss_gradient_scale(loss_scale, total);
    sums = pipeline_forward_backward(model, grads, micro_batches, z_coef, scale, 512,
                                     ParallelContext{ctx.tp, ctx.pp, ctx.cp}, nullptr, ctx.diag, ctx.recompute,
                                     buckets ? &*buckets : ctx.hooks);
  }
  if (inject) inject(sums);
  if (buckets) buckets->finish();
  if (ctx.hooks) ctx.hooks->finish();  // ZeRO-2/3: the reduce-scatters still in flight
  // Then over CP (each CP rank's rows gave a part of every gradient), after DP's buckets.
  if (ctx.cp && !ctx.hooks) all_reduce_gradients(params, *ctx.cp, ctx.bucket_bytes);
  if (ctx.tp && !ctx.hooks) sum_kv_replica_gradients(params, *ctx.tp);
  std::vector<double> v{sums.ce_sum, sums.z_sq_sum};  // the last stage holds them; others add zeros
  all_reduce_doubles(ctx.dp, v);
  all_reduce_doubles(ctx.cp, v);
  all_reduce_doubles(ctx.pp, v);
  return LossSums{v[0], v[1], total};
}

}  // namespace olmo2
