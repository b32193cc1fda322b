// The options of `olmo2 train` (command line or INI file) and the checks they get on
// their own, before any file is read or any rank is asked (docs/architecture.md §7
// training semantics; §4 rank layout for --tp/--pp/--dp; §9 metrics for --metrics-*).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/device.h"

namespace olmo2 {

/// Everything `olmo2 train` is told (command line or INI file). Defaults are the
/// OLMo 2 recipe's where it has one.
struct TrainOptions {
  std::string model_dir;     ///< --model: continue from this HF checkpoint
  std::string model_config;  ///< --model-config: a config.json to start from scratch
  std::string tokenizer;     ///< --tokenizer: copied into checkpoints (generate --prompt)
  std::vector<std::string> data;  ///< --data: .npy token files
  int64_t seq_len = 0;       ///< --seq-len (tokens per sequence)
  int64_t global_batch = 0;  ///< --global-batch (sequences per optimizer step)
  int64_t micro_batch = 0;   ///< --micro-batch (sequences per forward/backward; 0: global)
  int64_t steps = 0;         ///< --steps (optimizer steps of the run, counted from step 0)
  double lr = 4e-4;          ///< --lr peak learning rate
  double min_lr_ratio = 0.1; ///< --min-lr-ratio: final lr / peak
  int64_t warmup_steps = 0;  ///< --warmup-steps
  std::string schedule = "cosine";  ///< --schedule cosine|linear|constant
  /// --precision fp32|bf16: bf16 computes with bf16 copies of f32 master weights
  /// (docs/architecture.md §3.2); fp32 until bf16 training is proven against its reference.
  std::string precision = "fp32";
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip_grad = 1.0;    ///< --clip-grad (≤ 0: off)
  double z_loss = 1e-5;      ///< --z-loss coefficient
  double init_std = 0.02;    ///< --init-std
  uint64_t seed = 0;         ///< --seed: initialisation and data order
  std::string save_dir;      ///< --save-dir
  int64_t save_interval = 0; ///< --save-interval steps (0: only at the end)
  int keep = 3;              ///< --keep: newest checkpoints kept (0: all)
  std::string resume;        ///< --resume DIR, or "auto": the newest in save_dir if any
  /// --data-changed ok: a resume may read other data than the checkpoint's run (its
  /// data_files); said at start. "": such a resume is refused, naming the file.
  std::string data_changed;
  /// --resume-fallback: a checkpoint that fails verification is skipped (logged) for the
  /// newest older one that passes, instead of stopping the run (docs/architecture.md §7
  /// "Checkpoint integrity").
  bool resume_fallback = false;
  /// --allow-eos-mismatch: a model config whose eos_token_id lacks the tokenizer's EOS or
  /// the data's (tokenize.json) is a warning on rank 0, not an error (docs/architecture.md
  /// §7 "Token data and its EOS").
  bool allow_eos_mismatch = false;
  int64_t log_interval = 1;  ///< --log-interval steps between human-readable lines
  std::string log_format = "text";  ///< --log-format text|json (json: one object per step on stdout)
  std::string on_nonfinite = "skip"; ///< --on-nonfinite skip|stop
  /// --debug-scale-loss STEP:FACTOR multiplies step STEP's loss (and gradients) by
  /// FACTOR (may be nan or inf): injects spikes and non-finite values in tests.
  int64_t debug_scale_step = -1;
  double debug_scale_factor = 1.0;
  /// --debug-stop-after N: behave as if SIGTERM arrived during step N (tests of resume).
  int64_t debug_stop_after = 0;
  /// --debug-scale-rank R: apply --debug-scale-loss on world rank R only (to its local
  /// loss sums and gradients, after the backward); -1: on every rank, to the loss.
  int debug_scale_rank = -1;
  /// Tests only (no command-line option): a planted partitioning bug. Every step, world
  /// rank debug_grad_error_rank changes each of its local gradients (after the backward,
  /// before any reduction): debug_grad_error > 0 adds debug_grad_error × that gradient's
  /// RMS × a ±1 pattern fixed by (parameter name, element) — a wrong contribution of
  /// one rank's shard; < 0 scales it by 1 + |debug_grad_error| — a wrong factor. 0: off.
  double debug_grad_error = 0.0;
  int debug_grad_error_rank = -1;

  // The layout is the process groups' (the launcher's rank session makes them from
  // --tp --pp --dp); only the split of layers over its stages is the plan's to take.
  std::vector<int64_t> pp_layers;  ///< --pp-layers (empty: balanced)
  /// --pp-virtual V: model chunks per pipeline rank, the interleaved 1F1B schedule
  /// (docs/architecture.md §5 "Interleaved 1F1B"); 1: plain 1F1B.
  int pp_virtual = 1;
  int zero_stage = 0;              ///< --zero-stage: 1 AdamW state, 2 also gradients, 3 also parameters sharded over DP
  int64_t grad_bucket_mb = 25;     ///< --grad-bucket-mb: DP gradient all-reduce bucket size (MiB)
  /// Tests only (no command-line option): the bucket in bytes when > 0, overriding
  /// grad_bucket_mb (tiny models need several buckets below 1 MiB).
  int64_t grad_bucket_bytes = 0;
  /// --overlap on|off: DP gradient buckets (and ZeRO-2/3 reduce-scatters) posted while the
  /// backward runs and waited for before the optimizer, or issued and waited for after it;
  /// bit-identical results (docs/architecture.md §7 "Overlap").
  bool overlap = true;
  /// The gradient bucket in bytes: grad_bucket_bytes, else grad_bucket_mb MiB.
  int64_t bucket_bytes() const { return grad_bucket_bytes > 0 ? grad_bucket_bytes : grad_bucket_mb << 20; }
  /// --memory-per-rank: bytes one rank may hold; a run whose memory plan exceeds it on
  /// any rank is refused before any work (docs/architecture.md §7 "Memory plan"). 0: no check.
  int64_t memory_per_rank = 0;
  /// --recompute none|selective|full: the activations each decoder layer keeps from its
  /// forward to its backward, which recomputes the rest (docs/architecture.md §7
  /// "Recomputation"); results are bit-identical in every mode, only memory and time change.
  std::string recompute = "none";

  // Spike detection (monitoring/spike_detector.h) on the loss and the grad norm.
  int64_t spike_window = 128;  ///< --spike-window steps
  double spike_sigma = 6;      ///< --spike-sigma: a spike is > mean + sigma · std of the window
  bool skip_spikes = false;    ///< --skip-spikes: do not apply a step whose loss or grad norm spikes

  // Prometheus metrics (monitoring/train_metrics.h), served by world rank 0.
  int metrics_port = -1;                  ///< --metrics-port (-1: no endpoint; 0: a free port)
  /// --port-file: once the metrics endpoints listen, world rank 0 writes their
  /// addresses there, one "HOST:PORT" a line, its own first (scripts read the port that
  /// --metrics-port 0 bound); removed when the run ends.
  std::string port_file;
  std::string metrics_host = "127.0.0.1"; ///< --metrics-host
  bool metrics_per_node = false;          ///< --metrics-per-node: an endpoint on each node's first rank
  int64_t diag_interval = 10;             ///< --diag-interval: steps between per-layer diagnostics
  double peak_tflops = 0;                 ///< --peak-tflops per node for MFU (0: measure sgemm at start)

  /// --device: where parameters, gradients, optimizer state and activations live
  /// (docs/architecture.md §2, §7); the data loader and checkpoint files stay on the host.
  Device device = Device::CPU;
};

/// Checks `o` on its own (no files read). Throws InputError naming the option and
/// value: neither or both of model_dir/model_config, no data, non-positive sizes or
/// steps, global_batch % micro_batch ≠ 0, a bad schedule/log format/policy name,
/// out-of-range lr, betas, eps, ratio, keep, save_interval/resume without save_dir,
/// resume_fallback without resume,
/// a zero stage outside 0…3, a bucket size < 1, a recompute mode other than none,
/// selective or full, device CUDA in a build without CUDA.
void validate(const TrainOptions& o);

/// --overlap's value: true for "on", false for "off"; InputError naming `option` and
/// the value otherwise (`olmo2 train` and `olmo2 plan` alike).
bool parse_overlap(const std::string& text, const std::string& option);

}  // namespace olmo2
