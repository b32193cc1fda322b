#include "runtime/train/pipeline_schedule.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <span>

#include "parallel/tensor_collectives.h"

namespace olmo2 {
namespace {
constexpr int kForwardTag = 1;   // activations, stage s → s + 1
constexpr int kBackwardTag = 2;  // gradients, stage s + 1 → s

int64_t tokens_of(const std::vector<Sample>& samples) {
  int64_t n = 0;
  for (const Sample& s : samples) n += static_cast<int64_t>(s.input_ids.size());
  return n;
}
}  // namespace

LossSums pipeline_forward_backward(const Olmo2Model& model, ModelWeights& grads,
                                   const std::vector<std::vector<Sample>>& micro_batches, float z_coef,
                                   float scale, int64_t chunk, const ParallelContext& ctx, PipelineStats* stats,
                                   LayerDiagnostics* diag, Recompute recompute, UnitHooks* hooks) {
  const int64_t M = static_cast<int64_t>(micro_batches.size());
  if (M < 1) OLMO2_THROW(InputError, "a training step needs at least one micro-batch");
  PipelineStats local;
  PipelineStats& st = stats ? *stats : local;
  st = PipelineStats{};
  parallel::Communicator* pp = ctx.pipeline();
  LossSums sums;
  if (!pp) {
    for (const auto& mb : micro_batches) {
      StageForward f = stage_forward(model, &grads, mb, Tensor(), z_coef, scale, chunk, ctx, diag, recompute, hooks);
      stage_backward(model, grads, *f.saved, Tensor(), ctx, hooks);
      sums += f.sums;
      ++st.forwards, ++st.backwards, st.peak_live = 1;
    }
    return sums;
  }
  const int P = pp->size(), s = pp->rank();
  const bool first = s == 0, last = s == P - 1;
  const int64_t h = model.config().hidden_size;
  const int64_t warmup = std::min<int64_t>(P - s - 1, M);
  std::deque<StageActivationsPtr> live;  // forwarded, not yet backwarded (FIFO)
  int64_t next_fwd = 0, next_bwd = 0;
  const Device dev = hooks ? hooks->device() : weights_device(model);  // activations and gradients cross stages as device views
  // Under context parallelism a stage holds its CP rank's 1/cp of every sequence's rows.
  const int64_t cp = ctx.context_parallel() ? ctx.cp->size() : 1;
  auto buffer = [&](int64_t mb) {
    return Tensor::zeros({tokens_of(micro_batches[static_cast<size_t>(mb)]) / cp, h}, DType::F32, dev);
  };
  auto recv_forward = [&]() {
    if (first) return Tensor();
    Tensor in = buffer(next_fwd);
    parallel::recv(*pp, in.view(), s - 1, kForwardTag);
    return in;
  };
  auto forward = [&](const Tensor& in) {
    StageForward f = stage_forward(model, &grads, micro_batches[static_cast<size_t>(next_fwd)], in, z_coef, scale,
                                   chunk, ctx, diag, recompute, hooks);
    sums += f.sums;
    live.push_back(std::move(f.saved));
    ++next_fwd, ++st.forwards;
    st.peak_live = std::max<int64_t>(st.peak_live, static_cast<int64_t>(live.size()));
    return std::move(f.output);
  };
  auto backward = [&](const Tensor& grad_out) {
    Tensor g = stage_backward(model, grads, *live.front(), grad_out, ctx, hooks);
    live.pop_front();
    ++next_bwd, ++st.backwards;
    return g;
  };

  for (int64_t i = 0; i < warmup; ++i) {  // warm-up forwards
    const Tensor out = forward(recv_forward());
    if (!last) parallel::send(*pp, out.view(), s + 1, kForwardTag);
  }
  const int64_t steady = M - warmup;
  Tensor in = steady > 0 ? recv_forward() : Tensor();
  for (int64_t i = 0; i < steady; ++i) {  // one forward, one backward
    const Tensor out = forward(in);
    Tensor grad_out;
    if (!last) {
      grad_out = buffer(next_bwd);
      parallel::send_recv(*pp, out.view(), grad_out.view(), s + 1, kForwardTag, kBackwardTag);
    }
    const Tensor grad_in = backward(grad_out);
    if (i == steady - 1) {
      if (!first) parallel::send(*pp, grad_in.view(), s - 1, kBackwardTag);
    } else if (!first) {
      in = buffer(next_fwd);
      parallel::send_recv(*pp, grad_in.view(), in.view(), s - 1, kBackwardTag, kForwardTag);
    }
  }
  for (int64_t i = 0; i < warmup; ++i) {  // cool-down backwards
    Tensor grad_out;
    if (!last) {
      grad_out = buffer(next_bwd);
      parallel::recv(*pp, grad_out.view(), s + 1, kBackwardTag);
    }
    const Tensor grad_in = backward(grad_out);
    if (!first) parallel::send(*pp, grad_in.view(), s - 1, kBackwardTag);
  }
  OLMO2_CHECK(next_fwd == M && next_bwd == M && live.empty(), "1F1B schedule ended with ", next_fwd, " forwards, ",
              next_bwd, " backwards");
  return sums;
}

}  // namespace olmo2
