// Shared pieces of olmo2_train_bench (bench/README.md, "Training step"): the command line,
// the model sizes, the model-FLOP formula, the sgemm peak and small helpers. main() and the
// one-process mode are in olmo2_train_bench.cpp, the distributed mode (under mpirun) in
// train_bench_distributed.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/config.h"

namespace olmo2::bench {

using Clock = std::chrono::steady_clock;

/// Wall-clock seconds from `t0` to now.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// The command line; the defaults are those of the usage text.
struct Options {
  std::vector<std::string> sizes{"demo", "wide"};
  int64_t steps = 3, seq_len = 128, batch = 8, micro_batch = 0;  // micro 0: = batch
  int threads = 0;                                               // 0: all hardware threads
  std::string precision = "fp32";  // fp32 | bf16 (f32 master weights, a bf16 compute copy)
  int64_t sgemm_size = 2048, sgemm_reps = 3;
  std::string demo_config = std::string(OLMO2_SOURCE_DIR) + "/configs/olmo2-demo-27m.json";
  // Distributed mode (--tp/--pp/--dp given).
  bool distributed = false, sizes_given = false;
  int tp = 1, pp = 1, dp = 0;  // dp 0: world / (tp · pp)
  int zero_stage = 0;
  int pp_virtual = 1;  // --pp-virtual: model chunks per pipeline rank (interleaved 1F1B)
  int64_t warmup = 1;
  std::string tmp_dir;  // "": the system's temporary directory
};

/// Parses the flags (`--flag value` or `--flag=value`). On an error it prints the message
/// and the usage to stderr and exits with status 2; `--help` prints the usage to stdout and
/// exits with 0. Any of --tp/--pp/--dp selects the distributed mode, which takes one size
/// (default demo) and leaves micro_batch 0 when not given (run_distributed picks it from dp
/// and pp). Otherwise micro_batch defaults to batch and must divide it.
Options parse_args(int argc, char** argv);

/// "demo": configs/olmo2-demo-27m.json (--demo-config); "wide": hidden 512, 8 layers of 8
/// heads of 64, intermediate 1536, vocab 100352, untied (≈130M parameters); else a
/// config.json path.
ModelConfig size_config(const std::string& size, const Options& o);

/// Weights that enter a matrix product: per layer q, k, v, o, gate, up, down; lm_head
/// (the embedding matrix when tied). Not the embedding lookup or the norm gains.
double matmul_weights(const ModelConfig& c);

/// Model FLOPs of one training step (the MFU numerator) over B = `sequences` sequences of
/// T = `t` tokens, with N = matmul_weights(c), L layers, H query heads of hd:
///   B·T · (6·N + 12·L·H·hd·(T+1)/2)
/// A matrix product with N weights costs 2·N FLOPs per token forward and 4·N backward
/// (input and weight gradients). Causal attention: query i (1-based) attends to i keys,
/// QKᵀ and PV cost 2·H·hd·i each forward, so 4·H·hd·i per layer, 4·L·H·hd·(T+1)/2 per
/// token on average over i = 1..T; the backward is twice that (dQ, dK, dV, dP), hence ×3.
/// It equals 3·Olmo2Model::forward_flops(B·T, (T+1)/2).
double train_step_flops(const ModelConfig& c, int64_t sequences, int64_t t);

/// Best GFLOP/s of a square n×n×n sgemm (ops::linear, the model's cblas_sgemm call)
/// over `reps` timed runs after one warm-up, at the current thread count.
double sgemm_gflops(int64_t n, int64_t reps);

/// The three load averages of /proc/loadavg, or "unknown".
std::string load_average();

/// The distributed mode (train_bench_distributed.cpp): Trainer::step under mpirun over the
/// layout --tp/--pp/--dp; rank 0 prints the report. Returns the exit status.
int run_distributed(const Options& o);

}  // namespace olmo2::bench
