#include "runtime/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <tuple>

#include "ops/tensor_ops.h"
#include "parallel/agreement.h"
#include "runtime/model/init.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/checkpoint_verify.h"
#include "runtime/train/checkpoint_writer.h"
#include "runtime/train/data_identity.h"
#include "runtime/train/eos_check.h"
#include "runtime/train/generation_config_file.h"
#include "runtime/train/global_batch.h"
#include "monitoring/peak_memory.h"
#include "runtime/train/memory_report.h"
#include "runtime/train/grad_norm.h"
#include "runtime/train/sharded_state.h"
#include "runtime/train/shared_storage.h"
#include "runtime/train/streamed_gather.h"
#include "runtime/train/train_step.h"
#include "runtime/train/zero_startup.h"

namespace olmo2 {

namespace {
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  for (size_t b = 0, e; b < text.size(); b = e + 1) {
    e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    out.push_back(text.substr(b, e - b));
  }
  return out;
}

}  // namespace

// Every check that can fail comes before any work, inside parallel::agree, so that a
// failure on any rank stops every rank with one message (docs/architecture.md §6, §7).
Trainer::Trainer(TrainOptions o, parallel::ProcessGroups* groups)
    : options_(std::move(o)), groups_(groups), phases_(groups), faults_(options_) {
  if (groups_ && groups_->world->size() > 1) {
    world_ = groups_->world.get(), tp_ = groups_->tp.get(), pp_ = groups_->pp.get(), dp_ = groups_->dp.get();
    dp_rank_ = dp_->rank(), dp_size_ = dp_->size();
    if (groups_->cp && groups_->cp->size() > 1) cp_ = groups_->cp.get();
  }
  // Phase 1: the options and the layout, (rank 0) which checkpoints a resume may
  // continue, and the metrics port; every rank learns whether any failed before anyone
  // goes on.
  std::string candidates;  // one path a line
  parallel::agree(world_, [&] {
    check_options_and_layout();
    if (is_root()) {
      for (const std::string& c :
           RunDirectory::resume_candidates(options_.resume, options_.save_dir, options_.resume_fallback)) {
        candidates += c + "\n";
      }
    }
    metrics_ = std::make_unique<MetricsReporter>(options_, world_ ? groups_ : nullptr);
  });
  if (world_) parallel::broadcast_string(*world_, candidates, 0);
  const std::vector<std::string> candidate_dirs = split_lines(candidates);
  // Every rank sees rank 0's save directory and newest candidate checkpoint, before any
  // rank reads from them (docs/architecture.md §7 "Shared storage").
  check_shared_storage(world_, options_.save_dir, candidate_dirs.empty() ? std::string() : candidate_dirs.front());
  // The checkpoint (or the --model checkpoint) is verified before any of it is used, each
  // rank hashing and scanning its share (docs/architecture.md §7 "Checkpoint integrity").
  const std::string resume_dir = first_verified_checkpoint(candidate_dirs, options_.resume_fallback, world_);
  if (resume_dir.empty() && !options_.model_dir.empty()) {
    parallel::agree(world_, [&] {
      verify_model_directory(options_.model_dir, {world_ ? world_->rank() : 0, world_ ? world_->size() : 1},
                             is_root() ? &std::cerr : nullptr);
    });
  }
  // Phase 2, on every rank: the config, the layout, the data; (rank 0) the save directory;
  // the model and optimizer; the resumed state.
  uint64_t data_fingerprint = 0;
  parallel::agree(world_, [&] {
    const ModelConfig config = resolve_config(resume_dir);
    const ShardSpec shard = plan_layout(config);
    // The memory plan of every rank, computed alike on each: over --memory-per-rank it
    // is refused here, before any allocation (docs/architecture.md §7 "Memory plan").
    planned_memory_ = check_run_memory(config, options_, world_ ? groups_->topology.layout() : parallel::Layout{},
                                       micro_batch());
    open_data(config);
    const std::string from = resume_dir.empty() ? options_.model_dir : resume_dir;
    run_dir_.choose_tokenizer_source(options_.tokenizer, from);
    check_eos(config, from);
    kept_generation_config_ = generation_config_to_keep(from, config.vocab_size);
    if (is_root() && !options_.save_dir.empty()) run_dir_.lock(options_.save_dir, resume_dir);
    build_model_and_optimizer(config, shard, from);
    if (!resume_dir.empty()) resume_from(resume_dir);
    data_fingerprint = olmo2::data_fingerprint(data_files_);
  });
  // Phase 3: the metrics families and MFU peak; then every rank's data against rank 0's.
  metrics_->start(*model_);
  agree_on_data(data_fingerprint);
}

Trainer::~Trainer() = default;

void Trainer::check_options_and_layout() {
  const TrainOptions& opt = options_;
  validate(opt);
  loss_spikes_ = monitoring::SpikeDetector("loss", opt.spike_window, opt.spike_sigma);
  grad_spikes_ = monitoring::SpikeDetector("grad_norm", opt.spike_window, opt.spike_sigma);
  faults_.check_rank(world_ ? world_->size() : 1);
  if (cp_) {  // context parallelism: docs/architecture.md §7 "Context parallelism"
    const int cp = cp_->size();
    if (opt.seq_len % (2 * cp) != 0) {
      OLMO2_THROW(InputError, "--seq-len ", opt.seq_len, " is not divisible by 2 × --cp ", cp, " = ", 2 * cp,
                  " (each sequence is cut into 2 × cp equal chunks, two per context-parallel rank)");
    }
    if (opt.zero_stage >= 2) {
      OLMO2_THROW(InputError, "--zero-stage ", opt.zero_stage, " with --cp ", cp,
                  " is not supported (its gradient reduce-scatter runs over dp only): use --zero-stage 0 or 1");
    }
  }
  if (opt.zero_stage >= 1 && dp_size_ == 1) {
    OLMO2_THROW(InputError, "--zero-stage ", opt.zero_stage,
                " shards over data-parallel ranks; this layout has dp 1");
  }
  if (opt.micro_batch == 0 && opt.global_batch % dp_size_ != 0) {
    OLMO2_THROW(InputError, "--global-batch ", opt.global_batch, " is not divisible by dp ", dp_size_,
                " (each data-parallel rank takes an equal share)");
  }
  if (opt.global_batch % (micro_batch() * dp_size_) != 0) {
    OLMO2_THROW(InputError, "--global-batch ", opt.global_batch, " is not divisible by --micro-batch ",
                micro_batch(), " × dp ", dp_size_, " = ", micro_batch() * dp_size_);
  }
}

ModelConfig Trainer::resolve_config(const std::string& resume_dir) const {
  const TrainOptions& opt = options_;
  ModelConfig config =
      opt.model_config.empty() ? ModelConfig::load(opt.model_dir) : ModelConfig::load_file(opt.model_config);
  if (!resume_dir.empty()) {
    const ModelConfig saved = ModelConfig::load(resume_dir);
    const std::pair<const char*, int64_t ModelConfig::*> fields[] = {
        {"vocab_size", &ModelConfig::vocab_size}, {"hidden_size", &ModelConfig::hidden_size},
        {"intermediate_size", &ModelConfig::intermediate_size}, {"num_hidden_layers", &ModelConfig::num_hidden_layers},
        {"num_attention_heads", &ModelConfig::num_attention_heads},
        {"num_key_value_heads", &ModelConfig::num_key_value_heads}};
    for (const auto& [name, field] : fields) {
      if (saved.*field != config.*field) {
        OLMO2_THROW(InputError, "--resume ", resume_dir, ": the checkpoint's ", name, " is ", saved.*field, " but ",
                    opt.model_config.empty() ? opt.model_dir : opt.model_config, " says ", config.*field,
                    " (a checkpoint continues the model it was trained from)");
      }
    }
    if (is_root()) {
      const nlohmann::json a = config.to_json(), b = saved.to_json();
      std::string differ;
      for (const auto& [k, v] : b.items()) {
        if (k != "dtype" && (!a.contains(k) || a.at(k) != v)) differ += (differ.empty() ? "" : ", ") + k;
      }
      if (!differ.empty()) {
        std::cerr << "note: resuming with the checkpoint's config.json; "
                  << (opt.model_config.empty() ? opt.model_dir : opt.model_config) << " differs in " << differ << "\n";
      }
    }
    config = saved;
  } else if (opt.resume == "auto" && is_root()) {
    std::cerr << "no checkpoint in " << opt.save_dir << " yet: starting from step 0\n";
  }
  if (opt.seq_len > config.max_position_embeddings) {
    OLMO2_THROW(InputError, "--seq-len ", opt.seq_len, " exceeds the model's context (max_position_embeddings ",
                config.max_position_embeddings, ")");
  }
  return config;
}

ShardSpec Trainer::plan_layout(const ModelConfig& config) {
  ShardSpec shard = ShardSpec::whole(config);
  if (world_) {
    const parallel::Layout l = groups_->topology.layout();
    // The config is this run's own (a resumed checkpoint's), so the plan is made here,
    // over the topology the launcher's rank session checked.
    const parallel::PartitionPlan plan =
        parallel::make_partition_plan(model_shape(config), groups_->topology, options_.pp_layers, options_.pp_virtual);
    shard = ShardSpec::from_plan(plan, world_->rank());
    const int64_t per_step = options_.global_batch / (micro_batch() * dp_size_);
    if (options_.pp_virtual > 1 && per_step % l.pp != 0) {
      OLMO2_THROW(InputError, "--pp-virtual ", options_.pp_virtual, ": the interleaved schedule needs the micro-batches ",
                  "per step (--global-batch ", options_.global_batch, " / (--micro-batch ", micro_batch(), " × dp ",
                  dp_size_, ") = ", per_step, ") to be a multiple of pp ", l.pp);
    }
    if (config.tie_word_embeddings && l.pp > 1) {
      OLMO2_THROW(InputError, "the model ties lm_head to the embedding (tie_word_embeddings), which pipeline "
                              "parallelism cannot split over stages: use --pp 1");
    }
    layout_ = "tp " + std::to_string(l.tp) + ", pp " + std::to_string(l.pp) + ", dp " + std::to_string(l.dp) +
              (l.cp > 1 ? ", cp " + std::to_string(l.cp) : std::string());
    // --pp-virtual is not part of it: the interleaved schedule sums in plain 1F1B's order
    // (docs/architecture.md §5 "Interleaved 1F1B"), so a resume that changes it is exact.
  } else {
    parallel::check_virtual_stages(config.num_hidden_layers, 1, options_.pp_virtual, !options_.pp_layers.empty());
    layout_ = "tp 1, pp 1, dp 1";
  }
  return shard;
}

void Trainer::open_data(const ModelConfig& config) {
  const TrainOptions& opt = options_;
  DataLoaderOptions dl{opt.seq_len, opt.global_batch, opt.seed, config.vocab_size};
  loader_ = std::make_unique<DataLoader>(opt.data, dl);
  data_files_ = loader_->check_token_ids();
}

void Trainer::check_eos(const ModelConfig& config, const std::string& from) const {
  const std::string config_file = options_.model_config.empty() || from != options_.model_dir
                                      ? (std::filesystem::path(from) / "config.json").string()
                                      : options_.model_config;
  // The tokenizer checkpoints copy (--tokenizer, or the one of `from`), read once: a
  // non-tokenizer or one wider than the model is refused now.
  const std::string& tokenizer_file = run_dir_.tokenizer_source();
  std::optional<Tokenizer> tok;
  if (!tokenizer_file.empty()) {
    tok.emplace(Tokenizer::from_file(tokenizer_file));
    if (tok->vocab_size() > config.vocab_size) {
      OLMO2_THROW(InputError, options_.tokenizer.empty() ? "the tokenizer " : "--tokenizer ", tokenizer_file, " has ",
                  tok->vocab_size(), " tokens, more than the model's vocab_size ", config.vocab_size);
    }
  }
  const std::vector<std::string> mismatches = training_eos_mismatches(
      config.eos_token_ids, config_file, tok ? &*tok : nullptr, tokenizer_file, options_.data);
  if (is_root()) {
    for (const std::string& note : training_tokenizer_notes(tokenizer_file, options_.data)) {
      std::cerr << "note: " << note << std::endl;
    }
  }
  if (mismatches.empty()) return;
  std::string all;
  for (const std::string& m : mismatches) all += (all.empty() ? "" : "; ") + m;
  if (!options_.allow_eos_mismatch) {
    OLMO2_THROW(InputError, all, ": documents would be separated by another token than the model stops on; give "
                "--allow-eos-mismatch to train anyway");
  }
  if (is_root()) std::cerr << "warning: " << all << "; training anyway (--allow-eos-mismatch)" << std::endl;
}

void Trainer::build_model_and_optimizer(const ModelConfig& config, const ShardSpec& shard, const std::string& from) {
  const TrainOptions& opt = options_;
  schedule_ = LrSchedule{opt.lr, opt.warmup_steps, opt.steps, opt.min_lr_ratio, parse_schedule(opt.schedule)};
  const Precision precision = parse_precision(opt.precision, "--precision");
  // The parameters the optimizer updates are f32: the model's own weights in fp32, the
  // master weights beside a bf16 compute copy in bf16 (docs/architecture.md §3.2).
  // Everything the step touches lives on --device (docs/architecture.md §2): a checkpoint
  // is read on the host and copied there; initial values are computed on the host and
  // copied by init_parameters.
  const Device device = opt.device;
  check_zero_stage_model(opt.zero_stage, config, tp_ ? tp_->size() : 1);
  // ZeRO stages 2 and 3 (dp > 1 was checked) never allocate the whole gradient, and
  // stage 3 not the whole model either: those tensors are shapes only, and stage 3 fills
  // its master chunks one unit at a time below (docs/architecture.md §7 "ZeRO stages").
  const bool zero2 = opt.zero_stage >= 2, zero3 = opt.zero_stage >= 3;
  const bool bf16 = precision == Precision::BF16;
  if (zero3) {
    const ModelConfig c = from.empty() ? config : ModelConfig::load(from);
    model_ = std::make_unique<Olmo2Model>(
        Olmo2Model::from_weights(c, shard, shape_only_weights(c, shard, weight_dtype(precision), device), precision));
    if (bf16) master_ = shape_only_weights(c, shard, DType::F32, device);
  } else {
    model_ = std::make_unique<Olmo2Model>(!from.empty() ? Olmo2Model::load(from, shard, Precision::FP32)
                                                        : Olmo2Model::from_weights(config, shard, zero_weights(config, shard, device)));
    if (!from.empty() && device != Device::CPU) {
      model_ = std::make_unique<Olmo2Model>(Olmo2Model::from_weights(model_->config(), model_->shard(),
                                                                     weights_on(model_->weights(), device)));
    }
    if (bf16) master_ = std::move(model_->mutable_weights());
  }
  ModelWeights& values = bf16 ? master_ : model_->mutable_weights();
  grads_ = zero2 ? shape_only_weights(model_->config(), shard, DType::F32, device) : zeros_like_weights(values);
  params_ = list_parameters(values, grads_, model_->config(), model_->shard());
  if (from.empty() && !zero3) init_parameters(params_, opt.seed, opt.init_std);
  if (bf16 && !zero3) {
    model_ = std::make_unique<Olmo2Model>(
        Olmo2Model::from_weights(model_->config(), model_->shard(), weights_in(master_, DType::BF16), Precision::BF16));
  }
  optimizer_ = std::make_unique<DataParallelAdamW>(params_, AdamWOptions{opt.beta1, opt.beta2, opt.eps, opt.weight_decay},
                                                   dp_, opt.zero_stage);
  if (optimizer_->stage() < 2) return;
  // The tensors the model computes with, in parameter order (the values themselves in fp32).
  std::vector<Tensor*> compute;
  for (const Parameter& p : list_parameters(model_->mutable_weights(), grads_, model_->config(), model_->shard())) {
    compute.push_back(p.value);
  }
  zero_ = std::make_unique<ZeroShards>(*optimizer_, params_, std::move(compute), *dp_, model_->weights().layers.size(),
                                       opt.bucket_bytes(), opt.overlap);
  if (!zero3) return;
  if (from.empty()) {
    // Element g of a tensor is a function of (seed, name, g) alone: unit by unit gives the same bits.
    zero_->fill_master([&](const Parameter& p) { init_parameter(p, opt.seed, opt.init_std); });
  } else {
    const Checkpoint checkpoint = Checkpoint::open(from);
    zero_->fill_master([&](const Parameter& p) { load_parameter(checkpoint, p); });
  }
}

void Trainer::agree_on_data(uint64_t data_fingerprint) {
  // Every rank must read the same token files (their paths may differ by node).
  if (world_) {
    uint64_t root_fp = data_fingerprint;
    world_->broadcast(std::span<uint64_t>(&root_fp, 1), 0);
    parallel::agree(world_, [&] {
      if (data_fingerprint != root_fp) {
        OLMO2_THROW(InputError, "--data: this rank reads other token data than rank 0 (", loader_->num_windows(),
                    " windows, fingerprint ", data_fingerprint, " vs ", root_fp,
                    "); every rank must see the same files, in the same order");
      }
    });
  }
}

int64_t Trainer::micro_batch() const {
  return options_.micro_batch ? options_.micro_batch : options_.global_batch / dp_size_;
}

void Trainer::resume_from(const std::string& dir) {
  const TrainingState st = load_training_state(dir);
  const nlohmann::json& j = st.state;
  try {
    step_ = j.at("step").get<int64_t>();
    skipped_ = j.at("skipped_steps").get<int64_t>();
    nonfinite_ = j.at("nonfinite_steps").get<int64_t>();
    tokens_ = j.at("tokens").get<int64_t>();
    if (j.contains("spike_detector")) {
      loss_spikes_.restore(j.at("spike_detector").at("loss"));
      grad_spikes_.restore(j.at("spike_detector").at("grad_norm"));
    }
    if (check_resumed_data(j, dir)) loader_->restore(j.at("data_loader").get<DataLoaderState>());
    const int64_t micro = j.at("micro_batch").get<int64_t>();
    const std::string layout = j.value("layout", std::string("tp 1, pp 1, dp 1"));
    if (layout != layout_ && is_root()) {
      std::cerr << "note: resuming a run of " << layout << ", micro-batch " << micro << " in " << layout_
                << ", micro-batch " << micro_batch()
                << ": the weights and optimizer state are resharded; the sums run in another order, so the "
                   "run continues within rounding of, not bit-identical to, an uninterrupted one\n";
    } else if (micro != micro_batch() && is_root()) {
      // Same layout: nothing is resharded; only the gradients' sums over micro-batches
      // (and the products' row counts) change, which may move the last bits of later steps.
      std::cerr << "note: resuming a run of micro-batch " << micro << " with micro-batch " << micro_batch() << " ("
                << layout_ << " as before: the weights and optimizer state load as saved); the gradients are summed "
                << "over other micro-batches, so later steps may differ from an uninterrupted run in the last bits\n";
    }
  } catch (const nlohmann::json::exception& e) {
    OLMO2_THROW(InputError, "--resume ", dir, ": training_state.json: ", e.what());
  }
  // Moments are saved whole (HF names); each rank takes its slice on the host, and the
  // optimizer copies it to the parameters' device.
  optimizer_->restore(
      [&](const std::string& name, const Parameter& p) {
        const Tensor whole = st.load_f32(name, p.full_shape);
        Tensor local = Tensor::zeros(p.value->shape());
        copy_from_full(p, whole.view(), local.view());
        return local;
      },
      j.value("optimizer_steps", int64_t{-1}));
  if (step_ >= options_.steps) {
    OLMO2_THROW(InputError, "--resume ", dir, ": the checkpoint is at step ", step_, " and --steps is ",
                options_.steps, ": nothing to do (raise --steps to train further)");
  }
  if (is_root()) std::cerr << "resumed from " << dir << " at step " << step_ << "\n";
  // Hyper-parameters may change on resume (a longer run, a lower lr): say so.
  const nlohmann::json now = state_json();
  for (const char* key : {"schedule", "z_loss", "optimizer", "precision"}) {
    if (j.contains(key) && j.at(key) != now.at(key) && is_root()) {
      std::cerr << "note: " << key << " differs from the checkpoint's (" << j.at(key).dump() << " -> "
                << now.at(key).dump() << "); the run continues with the new one\n";
    }
  }
  if (j.contains("recompute") && j.at("recompute") != now.at("recompute") && is_root()) {
    std::cerr << "note: recompute differs from the checkpoint's (" << j.at("recompute").dump() << " -> "
              << now.at("recompute").dump() << "); it changes memory and time only: the run continues bit for bit\n";
  }
}

bool Trainer::check_resumed_data(const nlohmann::json& j, const std::string& dir) const {
  if (!j.contains("data_files")) {  // written before checkpoints recorded their data
    if (is_root()) {
      std::cerr << "note: " << dir << " records no data files (an older checkpoint): whether this run reads the "
                << "same data cannot be checked\n";
    }
    return true;
  }
  const std::string difference = data_difference(j.at("data_files").get<std::vector<DataFileIdentity>>(), data_files_);
  if (difference.empty()) return true;
  if (options_.data_changed != "ok") {
    OLMO2_THROW(InputError, "--resume ", dir, ": ", difference,
                "; a resume must read the data it was trained on, in the same order (give --data-changed ok to go "
                "on with other data)");
  }
  const DataLoaderState was = j.at("data_loader").get<DataLoaderState>();
  const bool fits = was.num_windows == loader_->num_windows() && was.seq_len == options_.seq_len &&
                    was.global_batch == options_.global_batch && was.seed == options_.seed;
  if (is_root()) {
    std::cerr << "note: --data-changed ok: " << difference << "; "
              << (fits ? "the data order goes on from the checkpoint's position (epoch " + std::to_string(was.epoch) +
                             ", step " + std::to_string(was.step_in_epoch) + ")"
                       : std::string("the new data is read from its start (its windows differ from the checkpoint's)"))
              << "\n";
  }
  return fits;
}

nlohmann::json Trainer::state_json() const {
  return {{"step", step_},
          {"optimizer_steps", optimizer_->steps()},
          {"precision", options_.precision},
          {"tokens", tokens_},
          {"skipped_steps", skipped_},
          {"nonfinite_steps", nonfinite_},
          {"seed", options_.seed},
          {"micro_batch", micro_batch()},
          {"layout", layout_},
          {"zero_stage", options_.zero_stage},
          {"recompute", options_.recompute},
          {"data_loader", loader_->state()},
          {"data_files", data_files_},
          {"schedule", {{"kind", options_.schedule}, {"peak_lr", options_.lr}, {"warmup_steps", options_.warmup_steps},
                        {"total_steps", options_.steps}, {"min_lr_ratio", options_.min_lr_ratio}}},
          {"z_loss", options_.z_loss},
          {"optimizer", {{"weight_decay", options_.weight_decay}, {"beta1", options_.beta1}, {"beta2", options_.beta2},
                         {"eps", options_.eps}, {"clip_grad", options_.clip_grad}, {"zero_stage", options_.zero_stage}}},
          {"spike_detector", {{"loss", loss_spikes_.state()}, {"grad_norm", grad_spikes_.state()}}},
          {"rng", {{"note", "no stochastic ops: init and data order derive from seed"}, {"seed", options_.seed}}}};
}

StepRecord Trainer::step() {
  const auto t0 = std::chrono::steady_clock::now();
  phases_.start();
  const TrainOptions& o = options_;
  const int64_t micro = micro_batch();
  const int64_t n_micro = o.global_batch / (micro * dp_size_);
  std::vector<std::vector<Sample>> batches;
  for (int64_t m = 0; m < n_micro; ++m) batches.push_back(loader_->batch(dp_rank_, dp_size_, m, micro));
  StepRecord r;
  r.step = step_ + 1;
  r.lr = schedule_.lr(step_);
  std::vector<Parameter>& grads = grad_params();
  for (const Parameter& p : grads) ops::fill(p.grad->view(), 0.0);
  const double factor = faults_.loss_factor(r.step);
  const std::function<void(LossSums&)> inject = faults_.injection(r.step, world_ ? world_->rank() : 0, grads);
  // Per-layer diagnostics every --diag-interval steps (and at step 1) when metrics are on;
  // the option is the same on every rank, so every rank takes the same branch.
  const bool diag_step = metrics_->diagnostics_at(r.step);
  LayerDiagnostics diag;
  if (diag_step) diag.reset(model_->weights().layers.size());
  const LossSums sums = global_batch_forward_backward(*model_, params_, grads_, batches, static_cast<float>(o.z_loss),
                                                      factor,
                                                      TrainContext{tp_, pp_, dp_, o.bucket_bytes(),
                                                                  diag_step ? &diag : nullptr,
                                                                  parse_recompute(o.recompute, "--recompute"), zero_.get(),
                                                                  o.pp_virtual, cp_, o.overlap, &bucket_storage_},
                                                      inject);
  // A ZeRO-3 prefetch left posted would carry this step's weights into the next one.
  OLMO2_CHECK(!zero_ || zero_->in_flight() == 0, zero_->in_flight(), " ZeRO-3 gathers outlived the backward");
  OLMO2_CHECK(!zero_ || zero_->reductions_in_flight() == 0, " ZeRO reduce-scatters outlived the step's backward");
  std::vector<double> layer_grad_sq;
  if (diag_step) {
    layer_grad_sq = metrics_->layer_grad_squares(grads);  // before clipping changes them
    if (zero_) all_reduce_doubles(dp_, layer_grad_sq);  // each DP rank's chunks
  }
  const int64_t count = sums.count;
  r.target_tokens = count;
  r.grad_norm = global_grad_norm(grads, tp_, pp_, zero_ ? dp_ : nullptr);
  if (count > 0) {
    r.loss = factor * sums.ce_sum / static_cast<double>(count);
    r.z_loss = factor * o.z_loss * sums.z_sq_sum / static_cast<double>(count);
  }
  // One decision for every rank, from the reduced values (and a world vote, so that a
  // rank whose copy differs cannot take another branch). The spike detectors see the
  // same reduced values on every rank.
  const bool nonfinite =
      parallel::any_rank(world_, !std::isfinite(r.loss) || !std::isfinite(r.z_loss) || !std::isfinite(r.grad_norm));
  if (!nonfinite && count > 0) {
    const monitoring::SpikeCheck ls = loss_spikes_.observe(r.loss), gs = grad_spikes_.observe(r.grad_norm);
    r.loss_spike = ls.spike, r.grad_norm_spike = gs.spike;
    for (const auto& [check, name, value] : {std::tuple{ls, "loss", r.loss}, std::tuple{gs, "grad_norm", r.grad_norm}}) {
      if (!check.spike || !is_root()) continue;
      const nlohmann::json event = {{"event", "spike"},        {"signal", name},       {"step", r.step},
                                    {"value", value},          {"mean", check.mean},   {"std", check.std},
                                    {"threshold", check.threshold}, {"sigma", o.spike_sigma},
                                    {"skipped", o.skip_spikes}};
      std::cerr << event.dump() << std::endl;  // one structured line per event
    }
  }
  const bool skip_spike = parallel::any_rank(world_, o.skip_spikes && (r.loss_spike || r.grad_norm_spike));
  if (nonfinite) {
    ++nonfinite_;
    if (o.on_nonfinite == "stop") {
      OLMO2_THROW(TrainingStopped, "step ", r.step, ": non-finite ",
                  std::isfinite(r.loss) ? "gradient" : "loss", " (loss ", r.loss, ", grad norm ", r.grad_norm,
                  "); stopping with the weights of step ", step_, " unchanged (--on-nonfinite stop)");
    }
    ++skipped_;
    r.skipped = true;
  } else if (skip_spike) {
    ++skipped_;
    r.skipped = true;
  } else if (count > 0) {
    clip_grad_norm(grads, r.grad_norm, o.clip_grad);
    optimizer_->step(r.lr);
    // The compute copy (ZeRO-3 rounds the master chunks at each gather instead).
    if (model_->precision() == Precision::BF16 && optimizer_->stage() < 3) copy_weights(master_, model_->mutable_weights());
  }
  loader_->advance();
  ++step_;
  tokens_ += o.global_batch * o.seq_len;
  r.tokens = tokens_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens_per_second = static_cast<double>(o.global_batch * o.seq_len) / r.seconds;
  r.peak_rss_bytes = monitoring::peak_resident_bytes();
  phases_.finish(r);
  metrics_->record_metrics(r, nonfinite, diag_step, diag, std::move(layer_grad_sq));
  return r;
}

void Trainer::record_save_seconds(double seconds) { metrics_->record_save_seconds(seconds); }

std::string Trainer::save() {
  OLMO2_CHECK(!options_.save_dir.empty(), "save() without --save-dir");
  CheckpointPlan plan{model_->config(), {}, {}, state_json(), run_dir_.tokenizer_source(), kept_generation_config_};
  plan.config.dtype = DType::F32;
  // This rank's tensors: every parameter it writes (under MPI: owned, DP replica 0 sends)
  // and its two moments, each produced when the writer asks for it (docs/architecture.md
  // §7 "Checkpoint writing at scale").
  const int tp_rank = tp_ ? tp_->rank() : 0;
  std::vector<StreamedSlice> slices;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Parameter& p = params_[i];
    if (world_ && !p.owned(tp_rank)) continue;
    // ZeRO-3: assembled from the master chunks over DP, as a sharded moment is.
    slices.push_back({p.name, &p, [this, i](Tensor& keep) { return optimizer_->value(i, keep); }});
    for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
      slices.push_back({kind + p.name, &p, [this, kind, i](Tensor& keep) { return optimizer_->moment(kind, i, keep); }});
    }
  }
  if (!world_) {
    for (const StreamedSlice& s : slices) {
      (s.name == s.param->name ? plan.model_tensors : plan.state_tensors).push_back({s.name, DType::F32, s.param->value->shape()});
    }
    std::map<std::string, const StreamedSlice*> by_name;
    for (const StreamedSlice& s : slices) by_name.emplace(s.name, &s);
    CheckpointWriter writer(options_.save_dir, step_, std::move(plan), options_.keep);
    for (const std::string& name : writer.order()) {
      Tensor keep;
      writer.write(name, by_name.at(name)->data(keep));
    }
    const std::string path = writer.finish();
    run_dir_.checkpoint_written(path);
    return path;
  }
  // Rank 0 learns every slice's layout and plans the files (model in state-dict order,
  // then the moments); every rank learns the writer's order; then one whole tensor at a
  // time is gathered on rank 0 and written. An error of the writer is held until the
  // stream ends, so that no rank is left sending.
  const bool contribute = dp_rank_ == 0 && (!cp_ || cp_->rank() == 0);  // CP replicas hold the same weights
  const auto layouts = gather_slice_layouts(slices, contribute, *world_, 0);
  std::unique_ptr<CheckpointWriter> writer;
  parallel::agree(world_, [&] {
    if (!is_root()) return;
    for (const std::string& name : parameter_names(plan.config)) {
      const auto shape = [&](const std::string& n) {
        const auto it = layouts.find(n);
        return whole_shape(n, it == layouts.end() ? std::vector<SlicePiece>{} : it->second);
      };
      plan.model_tensors.push_back({name, DType::F32, shape(name)});
      for (const char* kind : {"exp_avg.", "exp_avg_sq."}) plan.state_tensors.push_back({kind + name, DType::F32, shape(kind + name)});
    }
    writer = std::make_unique<CheckpointWriter>(options_.save_dir, step_, std::move(plan), options_.keep);
  });
  std::string order;
  if (writer) for (const std::string& name : writer->order()) order += name + "\n";
  parallel::broadcast_string(*world_, order, 0);
  std::vector<std::string> names;
  for (size_t at = 0, end; (end = order.find('\n', at)) != std::string::npos; at = end + 1) names.push_back(order.substr(at, end - at));
  std::exception_ptr failed;
  try {
    stream_whole_tensors(names, slices, contribute, layouts, *world_, 0,
                         [&](const std::string& name, const TensorView& whole) { writer->write(name, whole); });
  } catch (const Error&) {
    failed = std::current_exception();  // the writer's error (root): agreed on below
  }
  std::string path;
  parallel::agree(world_, [&] {
    if (failed) std::rethrow_exception(failed);
    if (!is_root()) return;
    path = writer->finish();
    run_dir_.checkpoint_written(path);
  });
  parallel::broadcast_string(*world_, path, 0);
  return path;
}

RunEnd Trainer::run(const std::function<bool()>& stop_requested) {
  const TrainOptions& o = options_;
  const bool json = o.log_format == "json";
  const bool root = is_root();
  int64_t last_saved = -1;
  // The text line shows the step's loss and, like Megatron's log, the mean over the
  // steps since the previous line (single-batch losses are noisy).
  double loss_sum = 0;
  int64_t loss_n = 0;
  if (o.save_dir.empty() && root) std::cerr << "note: no --save-dir: no checkpoint will be written\n";
  // Every rank's peak resident memory beside its plan, after the run's first step and
  // at its end (collective: every rank reaches both alike).
  const int64_t first_step = step_ + 1;
  while (step_ < o.steps) {
    StepRecord r;
    try {
      r = step();
    } catch (const TrainingStopped&) {
      if (!o.save_dir.empty()) {
        const std::string path = save();
        if (root) std::cerr << "saved the unchanged weights: " << path << "\n";
      }
      throw;
    }
    if (json && root) std::cout << r.to_json().dump() << std::endl;
    if (!r.skipped) loss_sum += r.loss, ++loss_n;
    const bool spike = r.loss_spike || r.grad_norm_spike;
    if (root && (r.step % o.log_interval == 0 || r.step == o.steps || r.skipped || spike || r.step == 1)) {
      char line[320];
      std::snprintf(line, sizeof line,
                    "step %lld/%lld  loss %.4f (mean of %lld: %.4f)  z_loss %.3g  grad_norm %.3f  lr %.3g  "
                    "%.0f tok/s  compute %.0f%% bubble %.0f%% wait tp %.0f%% dp %.0f%% cp %.0f%%%s\n",
                    static_cast<long long>(r.step), static_cast<long long>(o.steps), r.loss,
                    static_cast<long long>(loss_n), loss_n ? loss_sum / static_cast<double>(loss_n) : 0.0,
                    r.z_loss, r.grad_norm, r.lr, r.tokens_per_second, 100 * r.compute_seconds / r.seconds,
                    100 * r.bubble_seconds / r.seconds, 100 * r.wait.tp / r.seconds, 100 * r.wait.dp / r.seconds,
                    100 * r.wait.cp / r.seconds,
                    r.skipped ? (spike ? "  SKIPPED (spike)" : "  SKIPPED (non-finite)") : spike ? "  SPIKE" : "");
      std::cerr << line << std::flush;
    }
    if (r.step % o.log_interval == 0 || r.step == o.steps || r.skipped || spike || r.step == 1) loss_sum = 0, loss_n = 0;
    if (r.step == first_step && r.step != o.steps) report_peak_memory(world_, planned_memory_, std::cerr);
    // A signal may reach some ranks only: stop when any rank saw one (one vote).
    bool stop = parallel::any_rank(world_, stop_requested && stop_requested()) || faults_.stop_after(step_);
    if (!o.save_dir.empty() && ((o.save_interval > 0 && step_ % o.save_interval == 0) || step_ == o.steps || stop)) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::string path = save();
      last_saved = step_;
      record_save_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (root) {
        std::cerr << "saved " << path << " ("
                  << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s)\n";
      }
      // A signal that arrived during this save stops here, on the checkpoint just
      // written, not after one more step and one more save (a second vote, only after
      // a save: the time to stop must fit Slurm's KillWait).
      if (!stop) stop = parallel::any_rank(world_, stop_requested && stop_requested());
    }
    if (stop && step_ < o.steps) {
      if (root) {
        std::cerr << "stop requested: stopped after step " << step_
                  << (last_saved == step_ ? " (checkpoint written)" : "") << "\n";
      }
      report_peak_memory(world_, planned_memory_, std::cerr);
      return last_saved == step_ ? RunEnd::kStoppedWithCheckpoint : RunEnd::kStoppedWithoutCheckpoint;
    }
  }
  report_peak_memory(world_, planned_memory_, std::cerr);
  return RunEnd::kFinished;
}

}  // namespace olmo2
