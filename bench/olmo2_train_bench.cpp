// Training-step throughput of OLMo 2 models built in memory, against OpenBLAS sgemm
// measured in the same run (bench/README.md, "Training step"): main() and the one-process
// mode. The distributed mode is in train_bench_distributed.cpp, the command line, the FLOP
// formula and the sgemm peak in train_bench_common.h.
//
//   olmo2_train_bench [--sizes demo,wide] [--steps 3] [--seq-len 128] [--batch 8]
//                     [--micro-batch B] [--threads N] [--sgemm-size 2048] [--sgemm-reps 3]
//                     [--demo-config configs/olmo2-demo-27m.json] [--precision fp32|bf16]
//
// One step = zero grads, forward_backward over the micro-batches, global grad norm, clip
// (max norm 1), AdamW — what Trainer::step does, without the data loader. With
// --precision bf16, as Trainer does (docs/architecture.md §3.2): the f32 master weights
// are the parameters, the forward and backward run on their bf16 copy, and the step
// ends by rounding the updated master weights into that copy. One untimed
// warm-up step, then --steps timed ones on fresh random tokens.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/bf16_gemm.h"
#include "ops/tensor.h"
#include "ops/threads.h"
#include "runtime/train/data_loader.h"
#include "runtime/model/init.h"
#include "runtime/model/model.h"
#include "runtime/train/optimizer.h"
#include "runtime/model/parameters.h"
#include "runtime/model/precision.h"
#include "runtime/model/weights.h"
#include "runtime/train/train_step.h"
#include "train_bench_common.h"
#include "ops/blas_core.h"

namespace olmo2::bench {
namespace {

/// Random micro-batches of one step: ids uniform over the vocabulary, labels the ids
/// shifted left with kIgnoreIndex last (as the data loader makes them).
std::vector<std::vector<olmo2::Sample>> random_batches(const ModelConfig& c, const Options& o, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<std::vector<olmo2::Sample>> micro(o.batch / o.micro_batch);
  for (auto& mb : micro) {
    for (int64_t s = 0; s < o.micro_batch; ++s) {
      olmo2::Sample smp;
      for (int64_t i = 0; i < o.seq_len; ++i) smp.input_ids.push_back(id(rng));
      smp.labels.assign(smp.input_ids.begin() + 1, smp.input_ids.end());
      smp.labels.push_back(olmo2::kIgnoreIndex);
      mb.push_back(std::move(smp));
    }
  }
  return micro;
}

/// Seconds of the parts of one step.
struct StepTimes {
  double zero = 0, fwd_bwd = 0, norm_clip = 0, adamw = 0;
  double cast = 0;  ///< bf16: master weights rounded into the compute copy
  double total() const { return zero + fwd_bwd + norm_clip + adamw + cast; }
  double optimizer() const { return zero + norm_clip + adamw + cast; }  // everything but fwd+bwd
};

/// One size's figures; `mean` is over the timed steps.
struct SizeResult {
  std::string size;
  ModelConfig config;
  int64_t params = 0;
  double matmul_n = 0, flops = 0;
  StepTimes mean;
  double best_step = 1e300, last_loss = 0, build_s = 0;
};

/// Builds the model of `size` (zero_weights + init_parameters, seed 1234), then runs one
/// warm-up and --steps timed steps on fresh random batches (progress on stderr).
SizeResult run_size(const std::string& size, const Options& o) {
  SizeResult r;
  r.size = size;
  r.config = size_config(size, o);
  const ModelConfig& c = r.config;
  if (o.seq_len > c.max_position_embeddings) {
    throw std::runtime_error(size + ": --seq-len exceeds max_position_embeddings " +
                             std::to_string(c.max_position_embeddings));
  }
  r.params = c.parameter_count();
  r.matmul_n = matmul_weights(c);
  r.flops = train_step_flops(c, o.batch, o.seq_len);
  std::fprintf(stderr, "[%s] building %lld parameters (hidden %lld, %lld layers, %lld heads, inter %lld, vocab %lld)\n",
               size.c_str(), static_cast<long long>(r.params), static_cast<long long>(c.hidden_size),
               static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.num_attention_heads),
               static_cast<long long>(c.intermediate_size), static_cast<long long>(c.vocab_size));

  const auto tb = Clock::now();
  const olmo2::ShardSpec whole = olmo2::ShardSpec::whole(c);
  const olmo2::Precision precision = olmo2::parse_precision(o.precision, "--precision");
  auto model = std::make_unique<olmo2::Olmo2Model>(
      olmo2::Olmo2Model::from_weights(c, whole, olmo2::zero_weights(c, whole)));
  // bf16: the model's f32 weights become the master weights the optimizer updates
  // (Trainer::build_model_and_optimizer does the same).
  olmo2::ModelWeights master;
  if (precision == olmo2::Precision::BF16) master = std::move(model->mutable_weights());
  olmo2::ModelWeights& values = precision == olmo2::Precision::BF16 ? master : model->mutable_weights();
  olmo2::ModelWeights grads = olmo2::zeros_like_weights(values);
  std::vector<olmo2::Parameter> params = olmo2::list_parameters(values, grads, c, whole);
  olmo2::init_parameters(params, /*seed=*/1234);
  if (precision == olmo2::Precision::BF16) {
    model = std::make_unique<olmo2::Olmo2Model>(olmo2::Olmo2Model::from_weights(
        c, whole, olmo2::weights_in(master, olmo2::DType::BF16), olmo2::Precision::BF16));
  }
  olmo2::AdamW adamw(params);
  r.build_s = seconds_since(tb);

  // Keep the header formula and Olmo2Model::forward_flops in agreement.
  const double via_model = 3.0 * model->forward_flops(o.batch * o.seq_len, (static_cast<double>(o.seq_len) + 1) / 2);
  if (std::abs(via_model - r.flops) > 1e-9 * r.flops) {
    std::fprintf(stderr, "[%s] warning: FLOP formula %.6g != 3*forward_flops %.6g\n", size.c_str(), r.flops, via_model);
  }

  std::mt19937 rng(42);
  const int64_t targets = o.batch * (o.seq_len - 1);
  const float scale = 1.0f / static_cast<float>(targets);
  constexpr float kZLoss = 1e-5f;
  constexpr double kLr = 3e-4, kMaxNorm = 1.0;
  for (int64_t step = 0; step <= o.steps; ++step) {  // step 0: warm-up
    const auto batches = random_batches(c, o, rng);
    StepTimes t;
    auto t0 = Clock::now();
    for (const olmo2::Parameter& p : params) std::fill(p.grad->f32(), p.grad->f32() + p.numel(), 0.0f);
    t.zero = seconds_since(t0);
    t0 = Clock::now();
    olmo2::LossSums sums;
    for (const auto& mb : batches) sums += olmo2::forward_backward(*model, grads, mb, kZLoss, scale);
    t.fwd_bwd = seconds_since(t0);
    t0 = Clock::now();
    const double norm = std::sqrt(olmo2::grad_norm_squared_local(params, true));
    olmo2::clip_grad_norm(params, norm, kMaxNorm);
    t.norm_clip = seconds_since(t0);
    t0 = Clock::now();
    adamw.step(params, kLr);
    t.adamw = seconds_since(t0);
    if (precision == olmo2::Precision::BF16) {
      t0 = Clock::now();
      olmo2::copy_weights(master, model->mutable_weights());  // the compute copy
      t.cast = seconds_since(t0);
    }
    r.last_loss = sums.ce_sum / static_cast<double>(sums.count);
    std::fprintf(stderr, "[%s] %s %lld: %.3f s (fwd+bwd %.3f, opt+norm %.3f) loss %.4f grad norm %.4f\n",
                 size.c_str(), step ? "step" : "warm-up", static_cast<long long>(step), t.total(), t.fwd_bwd,
                 t.optimizer(), r.last_loss, norm);
    if (step == 0) continue;
    r.mean.zero += t.zero / static_cast<double>(o.steps);
    r.mean.fwd_bwd += t.fwd_bwd / static_cast<double>(o.steps);
    r.mean.norm_clip += t.norm_clip / static_cast<double>(o.steps);
    r.mean.adamw += t.adamw / static_cast<double>(o.steps);
    r.mean.cast += t.cast / static_cast<double>(o.steps);
    r.best_step = std::min(r.best_step, t.total());
  }
  return r;
}

/// The one-process mode: every size in --sizes, between two sgemm peak measurements;
/// prints the header, the table and one JSON line per size. Returns the exit status.
int run_one_process(const Options& o) {
  const int threads = o.threads ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  try {
    olmo2::set_num_threads(threads);
    std::printf("olmo2_train_bench: threads %d, OpenBLAS core %s, precision %s, load average %s\n", threads,
                openblas_get_corename(), o.precision.c_str(), load_average().c_str());
    if (o.precision == "bf16") {
      std::printf("  bf16: f32 master weights and AdamW moments, forward/backward on a bf16 copy (products: %s)\n",
                  olmo2::ops::bf16_training_gemm_path_description().c_str());
    }
    std::printf("  seq_len %lld, batch %lld sequences (%lld micro-batches of %lld), 1 warm-up + %lld timed steps\n",
                static_cast<long long>(o.seq_len), static_cast<long long>(o.batch),
                static_cast<long long>(o.batch / o.micro_batch), static_cast<long long>(o.micro_batch),
                static_cast<long long>(o.steps));
    std::printf("  step = zero grads + forward_backward (z-loss 1e-5) + grad norm + clip 1.0 + AdamW (lr 3e-4)\n");
    std::printf("  model FLOPs/step = B*T * (6*N + 12*L*H*hd*(T+1)/2); N = matmul weights incl. lm_head, "
                "not the embedding\n");
    std::fflush(stdout);

    const double peak_start = sgemm_gflops(o.sgemm_size, o.sgemm_reps);
    std::vector<SizeResult> results;
    for (const std::string& s : o.sizes) results.push_back(run_size(s, o));
    const double peak_end = sgemm_gflops(o.sgemm_size, o.sgemm_reps);
    const double peak = std::max(peak_start, peak_end);
    std::printf("  sgemm %lld^3 (best of %lld): %.1f GFLOP/s before, %.1f after; peak = %.1f; load average now %s\n\n",
                static_cast<long long>(o.sgemm_size), static_cast<long long>(o.sgemm_reps), peak_start, peak_end,
                peak, load_average().c_str());

    std::printf("%-6s %11s %11s %8s %9s %9s %9s %9s %9s %7s\n", "size", "params", "N(matmul)", "tok/step",
                "step s", "fwd+bwd s", "opt s", "tokens/s", "GFLOP/s", "MFU");
    for (const SizeResult& r : results) {
      const double step = r.mean.total(), tokens = static_cast<double>(o.batch * o.seq_len);
      std::printf("%-6s %11lld %11.0f %8.0f %9.3f %9.3f %9.3f %9.1f %9.1f %6.1f%%\n", r.size.c_str(),
                  static_cast<long long>(r.params), r.matmul_n, tokens, step, r.mean.fwd_bwd, r.mean.optimizer(),
                  tokens / step, r.flops / step * 1e-9, 100.0 * r.flops / step * 1e-9 / peak);
    }
    std::printf("\n");
    for (const SizeResult& r : results) {
      const double step = r.mean.total(), tokens = static_cast<double>(o.batch * o.seq_len);
      const nlohmann::json j = {
          {"bench", "olmo2_train_bench"},
          {"size", r.size},
          {"precision", o.precision},
          {"product_path", o.precision == "bf16" ? olmo2::ops::bf16_training_gemm_path_description()
                                                : std::string("OpenBLAS sgemm (") + openblas_get_corename() + ")"},
          {"params", r.params},
          {"matmul_params", r.matmul_n},
          {"hidden", r.config.hidden_size},
          {"layers", r.config.num_hidden_layers},
          {"heads", r.config.num_attention_heads},
          {"intermediate", r.config.intermediate_size},
          {"vocab", r.config.vocab_size},
          {"threads", threads},
          {"seq_len", o.seq_len},
          {"batch", o.batch},
          {"micro_batch", o.micro_batch},
          {"steps", o.steps},
          {"tokens_per_step", tokens},
          {"model_flops_per_step", r.flops},
          {"step_s", step},
          {"best_step_s", r.best_step},
          {"zero_grad_s", r.mean.zero},
          {"fwd_bwd_s", r.mean.fwd_bwd},
          {"norm_clip_s", r.mean.norm_clip},
          {"adamw_s", r.mean.adamw},
          {"cast_s", r.mean.cast},
          {"tokens_per_s", tokens / step},
          {"model_gflops", r.flops / step * 1e-9},
          {"sgemm_peak_gflops", peak},
          {"mfu", r.flops / step * 1e-9 / peak},
          {"loss", r.last_loss},
          {"build_s", r.build_s},
      };
      std::printf("%s\n", j.dump().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "olmo2_train_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace olmo2::bench

int main(int argc, char** argv) {
  olmo2::restart_with_blas_kernels(argv);  // as olmo2 does: OpenBLAS on this CPU's kernels
  const olmo2::bench::Options o = olmo2::bench::parse_args(argc, argv);
  if (o.distributed) return olmo2::bench::run_distributed(o);
  return olmo2::bench::run_one_process(o);
}
