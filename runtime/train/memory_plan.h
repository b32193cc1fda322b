// The memory plan: the bytes every rank of a training (or serving) layout holds, and the
// bytes each process group sends per step, from the model's sizes and the options alone
// (no MPI, no allocation). `olmo2 plan` prints it; `olmo2 train --memory-per-rank`
// refuses a layout whose plan exceeds the size (docs/architecture.md §7 "Memory plan").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/device.h"
#include "parallel/partition.h"
#include "runtime/model/config.h"

namespace olmo2 {

/// What a plan is made for. Training unless `serve`.
struct MemoryPlanOptions {
  parallel::Layout layout;          ///< tp × cp × dp × pp ranks (cp: each sequence split over cp ranks)
  /// --pp-virtual: model chunks per pipeline rank (the interleaved 1F1B schedule,
  /// docs/architecture.md §5 "Interleaved 1F1B"); 1: plain 1F1B.
  int pp_virtual = 1;
  std::vector<int64_t> pp_layers;   ///< layers per stage (empty: balanced, as make_partition_plan)
  int zero_stage = 0;               ///< 0–3 (docs/architecture.md §7); ≥ 1 needs dp > 1
  std::string recompute = "none";   ///< none | selective | full: what a layer keeps per micro-batch
  std::string precision = "fp32";   ///< fp32 | bf16 (bf16: a bf16 compute copy beside f32 master weights)
  int64_t seq_len = 0;              ///< tokens per sequence
  int64_t micro_batch = 1;          ///< sequences per micro-batch
  int64_t global_batch = 0;         ///< sequences per step (0: micro_batch · dp, one micro-batch per rank)
  Device device = Device::CPU;      ///< where the state lives (the runtime baseline differs)
  int64_t grad_bucket_mb = 25;      ///< --grad-bucket-mb: the DP all-reduce bucket (MiB)
  /// --overlap: DP buckets reduced inside the backward (a copy of the gradients in bucket
  /// buffers) and ZeRO-2/3's last piece of a unit in flight beside the next unit's backward
  /// (docs/architecture.md §7 "Overlap").
  bool overlap = true;
  int64_t loss_chunk_tokens = 512;  ///< rows of logits the loss computes at once (train_step.h)
  /// Serving (`olmo2 serve`): weights in `serve_dtype`, no gradients, moments or
  /// activations kept, plus the KV cache of `kv_cache_bytes` on every rank.
  bool serve = false;
  DType serve_dtype = DType::BF16;
  int64_t kv_cache_bytes = 0;
  /// The KV pools' dtype (--kv-cache-dtype, docs/architecture.md §3.2) and block size
  /// (serve's default), for the block count `kv_cache_bytes` holds.
  DType kv_cache_dtype = DType::F32;
  int64_t kv_block_size = 16;
  /// Bytes every process holds besides the model's state (binary, libraries, OpenBLAS and
  /// MPI buffers, the data loader); −1: runtime_baseline_bytes(device).
  int64_t runtime_bytes = -1;
};

/// One rank's memory, bytes. total = runtime + weights + master_weights + gradients +
/// optimizer + comm_buffers + kv_cache + activations + working.
struct RankMemory {
  int rank = 0;
  parallel::Coords coords;
  int64_t layers = 0;                  ///< decoder layers of its stage
  int64_t weights = 0;                 ///< the compute copy (fp32: the parameters themselves)
  int64_t master_weights = 0;          ///< bf16: the f32 master weights (ZeRO-3: this rank's chunks)
  int64_t gradients = 0;               ///< f32 gradients (ZeRO-2/3: this rank's chunks)
  int64_t optimizer = 0;               ///< AdamW moments (ZeRO ≥ 1: of the chunk), ZeRO-1's staged chunk
  int64_t activations_per_micro_batch = 0;  ///< what the stage keeps of one micro-batch until its backward
  /// Micro-batches' worth of activations held at once: 1F1B min(pp − stage, micro-batches
  /// per step); interleaved (V chunks) ⌈pairs / V⌉ of the pairs in flight (see
  /// activations); 1 without pp.
  int64_t micro_batches_held = 0;
  /// per micro-batch × held; interleaved: per micro-batch × pairs / V, with pairs =
  /// min(w + 1, M·V) (micro-batch, chunk) pairs, w = min(2(pp − stage − 1) + (V − 1)·pp, M·V)
  int64_t activations = 0;
  int64_t working = 0;                 ///< transient: see working_phase
  std::string working_phase;           ///< which transient is the largest (a short phrase)
  int64_t comm_buffers = 0;            ///< pipeline receive buffers and (--overlap) the DP gradient buckets
  int64_t kv_cache = 0;                ///< serving only
  int64_t kv_block_bytes = 0;          ///< serving: one KV block id's bytes (KVCache::bytes_per_block)
  int64_t runtime = 0;                 ///< the process baseline
  int64_t total = 0;
  int64_t sent_tp = 0, sent_pp = 0, sent_dp = 0;  ///< bytes this rank sends per step in each group
  int64_t sent_cp = 0;  ///< context parallel: ring attention's K/V blocks and the gradient all-reduce
};

/// The checks of `options` that need no model: an unknown recompute mode or precision,
/// seq_len not divisible by 2·cp (the zigzag split), a
/// zero stage outside 0–3, seq_len or micro_batch < 1, a global batch not divisible by
/// micro_batch · dp, a bucket < 1 MiB, kv_cache_bytes < 0, --zero-stage or --recompute
/// with --serve. Throws InputError naming the option and value (`olmo2 plan` reports them
/// as usage errors, exit 2, as `olmo2 train` does).
void check_plan_options(const MemoryPlanOptions& options);

/// The plan of every rank, in world-rank order.
struct MemoryPlan {
  MemoryPlanOptions options;
  int64_t micro_batches = 1;  ///< per DP rank per step
  /// Serving: the KV blocks of every rank's pool, what the fullest rank holds in
  /// kv_cache_bytes (as `olmo2 serve` counts them); 0 when that is not even one.
  int64_t kv_blocks = 0;
  std::vector<RankMemory> ranks;
  /// The rank with the largest total (the first of equals).
  const RankMemory& largest() const;
};

/// The plan of `config` under `options`. Throws InputError, naming the option and value,
/// before computing anything: an unknown recompute mode or precision, a zero stage
/// outside 0–3 or ≥ 1 with dp 1, seq_len or micro_batch < 1, a global batch not divisible
/// by micro_batch · dp, training a tied-embedding model over pp > 1, kv_cache_bytes < 0,
/// a model ZeRO-2/3 cannot shard (check_zero_stage_model, as the trainer refuses it);
/// and what make_partition_plan throws for a layout the model does not divide.
/// Source: the allocations of runtime/train (train_step, pipeline_schedule, grad_sync,
/// data_parallel_adamw, trainer) and runtime/model/decoder_layer*, counted by hand; ZeRO
/// (Rajbhandari et al. 2020) and selective recomputation (Korthikanti et al. 2022).
MemoryPlan plan_memory(const ModelConfig& config, const MemoryPlanOptions& options);

/// The process baseline the plan adds to every rank: on the CPU measured with
/// `olmo2 train` on a tiny model (docs/architecture.md §7 "Memory plan"); on CUDA an
/// estimate of the context, cuBLASLt workspace and NCCL buffers.
int64_t runtime_baseline_bytes(Device device);

/// The `n` largest components of `m`, "name X.XX GB, …" (for refusals).
std::string largest_components(const RankMemory& m, int n = 3);

/// Bytes as "X.XX GB" (10^9 bytes; `decimals` digits after the point).
std::string format_gb(int64_t bytes, int decimals = 2);

}  // namespace olmo2
