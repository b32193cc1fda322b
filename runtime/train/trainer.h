// `olmo2 train`: the OLMo 2 recipe (DESIGN §5) — token-weighted loss with Z-loss over
// micro-batches, AdamW with warm-up + cosine/linear/constant schedule, global grad-norm
// clipping, non-finite guards, atomic HF-layout checkpoints and exact resume — on one
// process or over tensor-, pipeline- and data-parallel ranks (DESIGN §3–4).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "monitoring/spike_detector.h"
#include "monitoring/train_metrics.h"
#include "parallel/process_groups.h"
#include "runtime/train/data_loader.h"
#include "runtime/train/data_parallel_adamw.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/model/model.h"
#include "runtime/train/optimizer.h"
#include "runtime/model/parameters.h"
#include "runtime/train/train_step.h"

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
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip_grad = 1.0;    ///< --clip-grad (≤ 0: off)
  double z_loss = 1e-5;      ///< --z-loss coefficient
  double init_std = 0.02;    ///< --init-std
  uint64_t seed = 0;         ///< --seed: initialisation and data order
  std::string save_dir;      ///< --save-dir
  int64_t save_interval = 0; ///< --save-interval steps (0: only at the end)
  int keep = 3;              ///< --keep: newest checkpoints kept (0: all)
  std::string resume;        ///< --resume DIR, or "auto": the newest in save_dir if any
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

  // Layout (used when the Trainer is given process groups).
  int tp = 1, pp = 1;              ///< --tp, --pp
  int dp = 0;                      ///< --dp (0: world / (tp · pp))
  std::vector<int64_t> pp_layers;  ///< --pp-layers (empty: balanced)
  int zero_stage = 0;              ///< --zero-stage: 1 shards AdamW state over DP (ZeRO-1)
  int64_t grad_bucket_mb = 25;     ///< --grad-bucket-mb: DP gradient all-reduce bucket size (MiB)
  double collective_timeout = 300; ///< --collective-timeout seconds (0: forever): a hung peer becomes an error

  // Spike detection (monitoring/spike_detector.h) on the loss and the grad norm.
  int64_t spike_window = 128;  ///< --spike-window steps
  double spike_sigma = 6;      ///< --spike-sigma: a spike is > mean + sigma · std of the window
  bool skip_spikes = false;    ///< --skip-spikes: do not apply a step whose loss or grad norm spikes

  // Prometheus metrics (monitoring/train_metrics.h), served by world rank 0.
  int metrics_port = 0;                   ///< --metrics-port (0: no endpoint)
  std::string metrics_host = "127.0.0.1"; ///< --metrics-host
  bool metrics_per_node = false;          ///< --metrics-per-node: an endpoint on each node's first rank
  int64_t diag_interval = 10;             ///< --diag-interval: steps between per-layer diagnostics
  double peak_tflops = 0;                 ///< --peak-tflops per node for MFU (0: measure sgemm at start)
};

/// Checks `o` on its own (no files read). Throws InputError naming the option and
/// value: neither or both of model_dir/model_config, no data, non-positive sizes or
/// steps, global_batch % micro_batch ≠ 0, a bad schedule/log format/policy name,
/// out-of-range lr, betas, eps, ratio, keep, or save_interval/resume without save_dir,
/// a zero stage other than 0 or 1, a bucket size < 1.
void validate(const TrainOptions& o);

/// What one optimizer step did.
struct StepRecord {
  int64_t step = 0;          ///< 1-based index of the step just taken
  double loss = 0;           ///< cross-entropy, token-weighted mean over the global batch
  double z_loss = 0;         ///< z_coef · mean logsumexp² (the objective is loss + z_loss)
  double grad_norm = 0;      ///< global L2 norm before clipping
  double lr = 0;             ///< learning rate applied
  int64_t tokens = 0;        ///< input tokens seen by the run so far (all steps)
  int64_t target_tokens = 0; ///< non-ignored targets in this step
  double seconds = 0;        ///< wall time of the step
  double tokens_per_second = 0;
  bool skipped = false;      ///< the update was not applied (non-finite, or a spike with --skip-spikes)
  bool loss_spike = false;   ///< the loss spiked (SpikeDetector)
  bool grad_norm_spike = false;  ///< the grad norm spiked
  nlohmann::json to_json() const;
};

/// Thrown when training stops on purpose (--on-nonfinite stop); the message says why.
class TrainingStopped : public Error {
 public:
  using Error::Error;
};

/// One training run, on one process (no groups) or on every rank of a (tp, pp, dp)
/// layout (ProcessGroups). Under MPI every public member is collective: every rank calls
/// it in the same order. Rank 0 prints, locks the save directory and writes checkpoints.
///
/// The constructor does every check that can fail before any work:
/// options, data files (every token id < vocab) and batch shapes, the model config
/// (seq_len ≤ context), the tokenizer file, the checkpoint to resume from (same model
/// shape, data order and micro-batch; fewer steps than --steps), and the save
/// directory: created, writable, locked (flock on save_dir/.lock, so two runs cannot
/// share it) and, unless resuming from it, free of earlier checkpoints; under MPI also the
/// layout (world = tp·pp·dp, heads/kv heads/intermediate against tp, layers against pp,
/// global batch divisible by micro-batch × dp, tied embeddings with pp > 1). Throws
/// InputError naming what is wrong; under MPI every rank throws parallel::AgreedError
/// with the same message (no rank is left in a collective).
class Trainer {
 public:
  explicit Trainer(TrainOptions options, parallel::ProcessGroups* groups = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Takes one optimizer step over the next global batch: zero grads; the target count
  /// of this DP rank's share, summed over DP; the micro-batches of this rank's share
  /// through the 1F1B pipeline (forward/backward with scale 1/(global target count));
  /// gradients summed over DP (buckets) and over kv-head replicas; the global grad norm
  /// over TP and PP; the loss sums over DP and PP. If the loss or the grad norm is not
  /// finite on any rank (one all-reduce over the world decides, so every rank takes the
  /// same branch), no update (counted; or TrainingStopped with on_nonfinite = stop);
  /// else clip to clip_grad and AdamW (ZeRO-1 if asked) with the scheduled lr.
  StepRecord step();

  /// Records a checkpoint save's duration in the metrics (rank 0; no-op without them).
  void record_save_seconds(double seconds);

  /// Writes a checkpoint of the current state into save_dir (atomic); returns its path.
  /// Under MPI the whole model and the optimizer moments are gathered on rank 0 (from DP
  /// replica 0, ZeRO-1 shards first gathered over DP) and written there in the HF
  /// layout; a failure on rank 0 is thrown on every rank (AgreedError).
  std::string save();

  /// Runs until `steps`, logging and saving as configured; stops early (after saving)
  /// when `stop_requested()` turns true between steps (SIGTERM/SIGINT).
  void run(const std::function<bool()>& stop_requested);

  int64_t steps_done() const { return step_; }
  /// This rank's parameters (its shards), in HF state-dict order.
  const std::vector<Parameter>& parameters() const { return params_; }
  /// Micro-batch size in use (--micro-batch, default global batch / dp).
  int64_t micro_batch() const;
  /// True on world rank 0 (or without MPI): the rank that prints and writes.
  bool is_root() const { return !world_ || world_->rank() == 0; }
  int64_t skipped_steps() const { return skipped_; }
  /// Spikes flagged so far on the loss and on the grad norm (restored on resume).
  int64_t loss_spikes() const { return loss_spikes_.spikes(); }
  int64_t grad_norm_spikes() const { return grad_spikes_.spikes(); }
  const Olmo2Model& model() const { return *model_; }
  const TrainOptions& options() const { return options_; }
  /// The training state json saved beside the model (also what resume checks).
  nlohmann::json state_json() const;

 private:
  void resume_from(const std::string& dir);
  void lock_save_dir(const std::string& resume_dir);
  ParallelContext context() const;
  TrainOptions options_;
  parallel::ProcessGroups* groups_ = nullptr;
  parallel::Communicator* world_ = nullptr;  ///< null or size 1: one process
  parallel::Communicator *tp_ = nullptr, *pp_ = nullptr, *dp_ = nullptr;
  int dp_rank_ = 0, dp_size_ = 1;
  std::string layout_;  ///< "tp 2, pp 2, dp 1" for logs and the training state
  std::string tokenizer_source_;  ///< tokenizer.json copied into checkpoints ("" = none)
  std::unique_ptr<Olmo2Model> model_;
  ModelWeights grads_;
  std::vector<Parameter> params_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<DataParallelAdamW> optimizer_;
  LrSchedule schedule_;
  int64_t step_ = 0, skipped_ = 0, nonfinite_ = 0, tokens_ = 0;
  /// Set from --spike-window/--spike-sigma once the options are validated.
  monitoring::SpikeDetector loss_spikes_{"loss", 128, 6}, grad_spikes_{"grad_norm", 128, 6};
  std::unique_ptr<monitoring::MetricsEndpoint> endpoint_;  ///< rank 0, with --metrics-port
  std::unique_ptr<monitoring::TrainMetrics> metrics_;      ///< rank 0, with --metrics-port
  double peak_flops_ = 0;                                 ///< of the whole job, for MFU
  bool metrics_rank_ = false;  ///< this rank serves an endpoint (world rank 0, or a node's first)
  void record_metrics(const StepRecord& r, bool nonfinite, bool diag_step, const LayerDiagnostics& diag,
                      std::vector<double> layer_grad_sq);
  int lock_fd_ = -1;  ///< flock on save_dir/.lock, held for the run
};

}  // namespace olmo2
