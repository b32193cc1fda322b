#include "runtime/train/pipeline_schedule.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <memory>

#include "parallel/tensor_collectives.h"

namespace olmo2 {
namespace {
// Tags: activations into model chunk c travel with 1 + 2c, gradients into chunk c with
// 2 + 2c (1 and 2 for plain 1F1B). One source per (receiving chunk, direction), and
// MPI's non-overtaking rule keeps each tag's micro-batches in order.
int forward_tag(int chunk) { return 1 + 2 * chunk; }
int backward_tag(int chunk) { return 2 + 2 * chunk; }

int64_t tokens_of(const std::vector<Sample>& samples) {
  int64_t n = 0;
  for (const Sample& s : samples) n += static_cast<int64_t>(s.input_ids.size());
  return n;
}

// Where an operation's input comes from or its output goes: a pipeline rank and tag,
// or none (peer −1) at the ends of the virtual pipeline.
struct Link {
  int peer = -1;
  int tag = 0;
};

// The stage's neighbours in the virtual pipeline of P·V virtual stages (chunk c of
// stage s is virtual stage c·P + s; docs/architecture.md §5 "Interleaved 1F1B").
struct VirtualPipeline {
  int P, s, V;
  int virtual_stage(int c) const { return c * P + s; }
  Link input(const ScheduleOp& op) const {
    const int vs = virtual_stage(op.chunk);
    if (op.forward) return vs == 0 ? Link{} : Link{(s + P - 1) % P, forward_tag(op.chunk)};
    return vs == P * V - 1 ? Link{} : Link{(s + 1) % P, backward_tag(op.chunk)};
  }
  Link output(const ScheduleOp& op) const {
    const int vs = virtual_stage(op.chunk);
    if (op.forward) {
      if (vs == P * V - 1) return {};
      return {(s + 1) % P, forward_tag(s == P - 1 ? op.chunk + 1 : op.chunk)};
    }
    if (vs == 0) return {};
    return {(s + P - 1) % P, backward_tag(s == 0 ? op.chunk - 1 : op.chunk)};
  }
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

std::vector<ScheduleOp> pipeline_schedule(int stages, int stage, int chunks, int64_t micro_batches) {
  const int P = stages, V = chunks;
  const int64_t M = micro_batches;
  OLMO2_CHECK(P >= 1 && stage >= 0 && stage < P && V >= 1, "pipeline stage ", stage, " of ", P, ", ", V, " chunks");
  if (M < 1) OLMO2_THROW(InputError, "a training step needs at least one micro-batch");
  if (V > 1 && M % P != 0) {
    OLMO2_THROW(InputError, "--pp-virtual ", V, ": the interleaved schedule needs the micro-batches per step (", M,
                ") to be a multiple of pp ", P, " (micro-batches go through the chunks in groups of pp)");
  }
  const int64_t total = M * V;
  // The k-th forward (backward) of this stage: groups of P micro-batches pass through
  // chunk 0, 1, …, V−1 (backwards: V−1, …, 0) before the next group starts.
  auto op = [&](int64_t k, bool forward) {
    if (V == 1) return ScheduleOp{forward, k, 0};
    const int in_group = static_cast<int>((k / P) % V);
    return ScheduleOp{forward, (k / (static_cast<int64_t>(P) * V)) * P + k % P, forward ? in_group : V - 1 - in_group};
  };
  const int64_t warmup = V == 1 ? std::min<int64_t>(P - stage - 1, M)
                                : std::min<int64_t>(static_cast<int64_t>(P - stage - 1) * 2 + (V - 1) * P, total);
  std::vector<ScheduleOp> ops;
  for (int64_t k = 0; k < warmup; ++k) ops.push_back(op(k, true));
  for (int64_t k = 0; k < total - warmup; ++k) ops.push_back(op(warmup + k, true)), ops.push_back(op(k, false));
  for (int64_t k = total - warmup; k < total; ++k) ops.push_back(op(k, false));
  return ops;
}

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
  const VirtualPipeline vp{pp->size(), pp->rank(), static_cast<int>(model.shard().chunks.size())};
  const std::vector<ScheduleOp> order = pipeline_schedule(vp.P, vp.s, vp.V, M);
  const int64_t h = model.config().hidden_size;
  const Device dev = hooks ? hooks->device() : weights_device(model);  // activations and gradients cross stages as device views
  // On the CPU (MPI) every send is posted at once (send_start); each is freed once a test
  // finds it complete and the rest are waited for at the end of the step, so a stage
  // blocks only where its input has not arrived (its receive).
  // Device transports keep the blocking calls, pairing a send with the next receive from
  // the same peer (send_recv) so no message size can deadlock; the interleaved schedule
  // needs the former.
  const bool early = dev == Device::CPU;
  if (!early && vp.V > 1) {
    OLMO2_THROW(InputError, "--pp-virtual ", vp.V, ": the interleaved schedule runs on the CPU (MPI) only");
  }
  // Under context parallelism a stage holds its CP rank's 1/cp of every sequence's rows.
  const int64_t cp = ctx.context_parallel() ? ctx.cp->size() : 1;
  auto buffer = [&](int64_t mb) {
    return Tensor::zeros({tokens_of(micro_batches[static_cast<size_t>(mb)]) / cp, h}, DType::F32, dev);
  };
  struct Posted {
    Tensor data;
    parallel::AsyncHandle handle;
  };
  std::map<size_t, Tensor> inputs;  // op index → its input, received with the previous op's send (device)
  std::vector<Posted> sends;        // not yet found complete; the rest waited for at the end of the step
  auto idle = [&](auto&& blocking) {  // time blocked on pipeline messages
    const Clock::time_point t0 = Clock::now();
    blocking();
    st.idle_seconds += seconds_since(t0);
  };
  std::vector<std::deque<StageActivationsPtr>> live(static_cast<size_t>(vp.V));  // per chunk, FIFO
  int64_t held = 0, forwards = 0, backwards = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const ScheduleOp& op = order[i];
    Tensor in;
    const Link from = vp.input(op);
    if (auto it = inputs.find(i); it != inputs.end()) {
      in = std::move(it->second);
      inputs.erase(it);
    } else if (from.peer >= 0) {
      in = buffer(op.micro_batch);
      idle([&] { parallel::recv(*pp, in.view(), from.peer, from.tag); });
    }
    Tensor out;
    const size_t c = static_cast<size_t>(op.chunk);
    if (op.forward) {
      StageForward f = stage_forward(model, &grads, micro_batches[static_cast<size_t>(op.micro_batch)], in, z_coef,
                                     scale, chunk, ctx, diag, recompute, hooks, op.chunk);
      sums += f.sums;  // the last virtual stage's forwards run in micro-batch order
      live[c].push_back(std::move(f.saved));
      out = std::move(f.output);
      ++forwards, st.peak_live = std::max(st.peak_live, ++held);
    } else {
      OLMO2_CHECK(!live[c].empty(), "backward of chunk ", c, " before its forward");
      out = stage_backward(model, grads, *live[c].front(), in, ctx, hooks);
      live[c].pop_front();
      ++backwards, --held;
    }
    const Link to = vp.output(op);
    if (to.peer < 0) continue;
    if (early) {
      Posted p{std::move(out), {}};
      p.handle = pp->send_start(p.data.view(), to.peer, to.tag, ops::default_stream(dev));
      sends.push_back(std::move(p));
      // Sends the peer has received free their tensors now, not at the step's end (a
      // test is one MPI_Test each: it never blocks).
      std::erase_if(sends, [](Posted& q) { return q.handle.test() && (q.handle.wait(), true); });
      continue;
    }
    const bool pair = i + 1 < order.size() && vp.input(order[i + 1]).peer == to.peer;
    if (pair) {
      Tensor next = buffer(order[i + 1].micro_batch);
      idle([&] { parallel::send_recv(*pp, out.view(), next.view(), to.peer, to.tag, vp.input(order[i + 1]).tag); });
      inputs.emplace(i + 1, std::move(next));
    } else {
      idle([&] { parallel::send(*pp, out.view(), to.peer, to.tag); });
    }
  }
  idle([&] {
    for (Posted& p : sends) p.handle.wait();
  });
  st.forwards = forwards, st.backwards = backwards;
  OLMO2_CHECK(forwards == M * vp.V && backwards == M * vp.V && held == 0 && inputs.empty(),
              "pipeline schedule ended with ", forwards, " forwards, ", backwards, " backwards of ", M * vp.V);
  return sums;
}

}  // namespace olmo2
