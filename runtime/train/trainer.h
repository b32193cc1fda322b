// `olmo2 train`: the OLMo 2 recipe — token-weighted loss with Z-loss over micro-batches,
// AdamW with warm-up + cosine/linear/constant schedule, global grad-norm clipping,
// non-finite guards, atomic HF-layout checkpoints and exact resume (docs/architecture.md
// §7 training semantics) — on one process or over tensor-, pipeline- and data-parallel
// ranks (docs/architecture.md §4 rank layout, §5 partitioning). The run directory, the metrics and
// the test faults are units of their own (run_directory.h, metrics_reporter.h, fault_injection.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "monitoring/spike_detector.h"
#include "parallel/process_groups.h"
#include "runtime/model/model.h"
#include "runtime/model/parameters.h"
#include "runtime/train/data_loader.h"
#include "runtime/train/data_parallel_adamw.h"
#include "runtime/train/fault_injection.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/metrics_reporter.h"
#include "runtime/train/run_directory.h"
#include "runtime/train/step_phases.h"
#include "runtime/train/step_record.h"
#include "runtime/train/train_options.h"
#include "runtime/train/zero_shards.h"

namespace olmo2 {

/// Thrown when training stops on purpose (--on-nonfinite stop); the message says why.
class TrainingStopped : public Error {
 public:
  using Error::Error;
};

/// How Trainer::run ended; the same on every rank (the stop is one world vote).
enum class RunEnd {
  kFinished,                  ///< every one of --steps was taken
  kStoppedWithCheckpoint,     ///< a stop request ended it early, after saving its last step
  kStoppedWithoutCheckpoint,  ///< a stop request ended it early and there is no --save-dir
};

/// One training run, on one process (no groups) or on every rank of a (tp, pp, dp)
/// layout (ProcessGroups). Under MPI every public member is collective: every rank calls
/// it in the same order. Rank 0 prints, locks the save directory and writes checkpoints.
///
/// The constructor does every check that can fail before any work:
/// options, data files (every token id < vocab) and batch shapes, the model config
/// (seq_len ≤ context), the tokenizer file, the config's eos ids against the tokenizer's
/// and the data's EOS (eos_check.h), the checkpoint to resume from (verified by
/// checkpoint_verify.h; same model shape, data order and micro-batch; fewer steps than
/// --steps), and the save
/// directory: created, writable, locked (flock on save_dir/.lock, so two runs cannot
/// share it) and, unless resuming from it, free of earlier checkpoints; under MPI also the
/// model against the groups' layout (heads/kv heads/intermediate against tp, layers and
/// --pp-layers against pp, global batch divisible by micro-batch × dp, tied embeddings
/// with pp > 1; the layout itself is the groups' topology, checked by Topology::make). Throws
/// InputError naming what is wrong; under MPI every rank throws parallel::AgreedError
/// with the same message (no rank is left in a collective).
class Trainer {
 public:
  /// Builds the run in phases, each behind one parallel::agree (docs/architecture.md §6):
  /// (1) the options and the layout, the checkpoints to resume from, the metrics port;
  /// then, under MPI with a save directory, that every rank sees rank 0's save
  /// directory and newest candidate checkpoint (check_shared_storage,
  /// runtime/train/shared_storage.h); then the checkpoint verified
  /// (first_verified_checkpoint, each rank its share; with --resume-fallback the newest
  /// that passes), or a --model checkpoint's files;
  /// (2) the config, the partition, the data, the save directory's lock, the model and
  /// optimizer, the resumed state; then the metrics families and the data check across
  /// ranks. `groups`: the job's process groups, or null for one process. Throws as the
  /// class comment says.
  explicit Trainer(TrainOptions options, parallel::ProcessGroups* groups = nullptr);
  /// Releases the save directory's lock (rank 0), then the metrics endpoint.
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

  /// Records a checkpoint save's duration, in seconds, in the metrics (on the ranks that
  /// serve an endpoint; a no-op elsewhere and without --metrics-port). Local; throws nothing.
  void record_save_seconds(double seconds);

  /// Writes a checkpoint of the current state into save_dir (atomic); returns its path.
  /// The files are streamed (CheckpointWriter): one tensor at a time is produced and
  /// written. Under MPI rank 0 plans the files from every rank's slice layout, then
  /// each whole tensor in file order is gathered on rank 0 from DP replica 0's owned
  /// slices (a ZeRO-1 moment first assembled over DP), written and freed, so no rank
  /// holds more than one gathered tensor; a failure on rank 0 is thrown on every rank
  /// (AgreedError) once the stream has ended.
  std::string save();

  /// Runs until `steps`, logging and saving as configured; stops early (after saving)
  /// when `stop_requested()` turns true on any rank between steps (SIGTERM/SIGINT/
  /// SIGUSR1) or at --debug-stop-after. Returns how it ended (a stop at the last step
  /// counts as finished), alike on every rank; throws TrainingStopped for
  /// --on-nonfinite stop (after saving the unchanged weights when there is a save dir).
  RunEnd run(const std::function<bool()>& stop_requested);

  int64_t steps_done() const { return step_; }
  /// This rank's parameters (its shards), in HF state-dict order. At ZeRO stage 3 their
  /// values hold no storage outside a unit's use (the optimizer's chunks hold them; see
  /// ZeroShards), nor at stages 2 and 3 do their gradients — not even at start-up, which
  /// builds stage 3's chunks one unit at a time (ZeroShards::fill_master).
  const std::vector<Parameter>& parameters() const { return params_; }
  /// ZeRO stages 2 and 3: the units' gathers and reduce-scatters (null otherwise).
  const ZeroShards* zero_shards() const { return zero_.get(); }
  /// Micro-batch size in use (--micro-batch, default global batch / dp).
  int64_t micro_batch() const;
  /// True on world rank 0 (or without MPI): the rank that prints and writes.
  bool is_root() const { return !world_ || world_->rank() == 0; }
  int64_t skipped_steps() const { return skipped_; }
  /// Spikes flagged so far on the loss and on the grad norm (restored on resume).
  int64_t loss_spikes() const { return loss_spikes_.spikes(); }
  int64_t grad_norm_spikes() const { return grad_spikes_.spikes(); }
  const Olmo2Model& model() const { return *model_; }
  /// The optimizer of this rank's parameters (its moments; with ZeRO-1 this DP rank's share).
  const DataParallelAdamW& optimizer() const { return *optimizer_; }
  const TrainOptions& options() const { return options_; }
  /// The training state json saved beside the model (also what resume checks).
  nlohmann::json state_json() const;

 private:
  // The constructor's phases, in order (each may throw InputError; see the class comment).
  void check_options_and_layout();
  ModelConfig resolve_config(const std::string& resume_dir) const;
  ShardSpec plan_layout(const ModelConfig& config);
  void open_data(const ModelConfig& config);
  /// The run's tokenizer (the file checkpoints copy: no more tokens than the model's
  /// vocab_size), then the config's eos ids against its EOS and the tokenize.json beside
  /// each --data file (eos_check.h): InputError naming them, or with
  /// --allow-eos-mismatch a warning on rank 0. `from`: the model or checkpoint the run
  /// continues ("" for --model-config).
  void check_eos(const ModelConfig& config, const std::string& from) const;
  void build_model_and_optimizer(const ModelConfig& config, const ShardSpec& shard, const std::string& from);
  void resume_from(const std::string& dir);
  /// Whether the checkpoint's data (its training_state.json's data_files) is this run's:
  /// InputError naming the file when not, unless --data-changed ok (then a note, and
  /// false when the loader's position no longer fits the new data).
  bool check_resumed_data(const nlohmann::json& state, const std::string& dir) const;
  void agree_on_data(uint64_t data_fingerprint);

  TrainOptions options_;
  parallel::ProcessGroups* groups_ = nullptr;
  /// Wraps the groups' tp, dp and pp communicators in timers, so it comes before the
  /// pointers below are taken (docs/architecture.md §9 "Step time breakdown").
  StepPhases phases_;
  parallel::Communicator* world_ = nullptr;  ///< null or size 1: one process
  parallel::Communicator *tp_ = nullptr, *pp_ = nullptr, *dp_ = nullptr;
  /// The context-parallel group when it has more than one rank, else null (docs/architecture.md §7).
  parallel::Communicator* cp_ = nullptr;
  int dp_rank_ = 0, dp_size_ = 1;
  std::string layout_;  ///< "tp 2, pp 2, dp 1" for logs and the training state
  std::vector<int64_t> planned_memory_;  ///< the memory plan's total per world rank (bytes)
  FaultInjection faults_;
  std::unique_ptr<Olmo2Model> model_;  ///< computes: f32 weights, or bf16 copies of master_
  ModelWeights master_;                 ///< bf16 precision: the f32 master weights (params_ point here)
  ModelWeights grads_;                  ///< f32, the shapes of the parameters
  std::vector<Parameter> params_;
  std::unique_ptr<DataLoader> loader_;
  std::vector<DataFileIdentity> data_files_;  ///< what --data holds, in order (checkpoints record it)
  std::unique_ptr<DataParallelAdamW> optimizer_;
  Tensor bucket_storage_;  ///< --overlap: the DP gradient buckets' buffers, kept across steps
  std::unique_ptr<ZeroShards> zero_;  ///< ZeRO stages 2 and 3 (docs/architecture.md §7 "ZeRO stages")
  /// The gradients the step zeroes, measures and clips: params_, or at ZeRO stages 2 and 3
  /// the optimizer's chunks.
  std::vector<Parameter>& grad_params() { return zero_ ? optimizer_->chunk_parameters() : params_; }
  LrSchedule schedule_;
  int64_t step_ = 0, skipped_ = 0, nonfinite_ = 0, tokens_ = 0;
  /// Set from --spike-window/--spike-sigma once the options are validated.
  monitoring::SpikeDetector loss_spikes_{"loss", 128, 6}, grad_spikes_{"grad_norm", 128, 6};
  std::unique_ptr<MetricsReporter> metrics_;  ///< every rank; made in the first phase
  /// What checkpoints keep of `from`'s generation_config.json (generation_config_file.h).
  nlohmann::json kept_generation_config_ = nlohmann::json::object();
  RunDirectory run_dir_;  ///< last, so that the lock is released first (locked on rank 0 only)
};

}  // namespace olmo2
