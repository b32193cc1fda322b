#include "runtime/trainer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "runtime/checkpoint.h"
#include "runtime/init.h"
#include "runtime/tokenizer.h"
#include "runtime/train_step.h"

namespace olmo2 {
namespace fs = std::filesystem;

void validate(const TrainOptions& o) {
  if (o.model_dir.empty() == o.model_config.empty()) {
    OLMO2_THROW(InputError, "give exactly one of --model DIR (continue from a checkpoint) and "
                            "--model-config FILE (start from scratch)");
  }
  if (o.data.empty()) OLMO2_THROW(InputError, "no training data: give --data FILE.npy ...");
  if (o.seq_len < 2) OLMO2_THROW(InputError, "--seq-len must be at least 2, got ", o.seq_len);
  if (o.global_batch < 1) OLMO2_THROW(InputError, "--global-batch must be at least 1, got ", o.global_batch);
  if (o.micro_batch < 0) OLMO2_THROW(InputError, "--micro-batch must be at least 1, got ", o.micro_batch);
  if (o.micro_batch > 0 && o.global_batch % o.micro_batch != 0) {
    OLMO2_THROW(InputError, "--global-batch ", o.global_batch, " is not divisible by --micro-batch ",
                o.micro_batch);
  }
  if (o.steps < 1) OLMO2_THROW(InputError, "--steps must be at least 1, got ", o.steps);
  if (o.log_interval < 1) OLMO2_THROW(InputError, "--log-interval must be at least 1, got ", o.log_interval);
  if (!(o.weight_decay >= 0)) OLMO2_THROW(InputError, "--weight-decay must be ≥ 0, got ", o.weight_decay);
  if (!(o.beta1 >= 0 && o.beta1 < 1)) OLMO2_THROW(InputError, "--beta1 must be in [0, 1), got ", o.beta1);
  if (!(o.beta2 >= 0 && o.beta2 < 1)) OLMO2_THROW(InputError, "--beta2 must be in [0, 1), got ", o.beta2);
  if (!(o.eps > 0)) OLMO2_THROW(InputError, "--adam-eps must be > 0, got ", o.eps);
  if (!(o.z_loss >= 0)) OLMO2_THROW(InputError, "--z-loss must be ≥ 0, got ", o.z_loss);
  if (!(o.init_std > 0)) OLMO2_THROW(InputError, "--init-std must be > 0, got ", o.init_std);
  if (!(o.clip_grad >= 0)) OLMO2_THROW(InputError, "--clip-grad must be ≥ 0 (0: off), got ", o.clip_grad);
  if (o.debug_stop_after < 0) OLMO2_THROW(InputError, "--debug-stop-after must be ≥ 0, got ", o.debug_stop_after);
  if (o.keep < 0) OLMO2_THROW(InputError, "--keep must be ≥ 0, got ", o.keep);
  if (o.save_interval < 0) OLMO2_THROW(InputError, "--save-interval must be ≥ 0, got ", o.save_interval);
  if (o.save_interval > 0 && o.save_dir.empty()) OLMO2_THROW(InputError, "--save-interval needs --save-dir");
  if (o.resume == "auto" && o.save_dir.empty()) OLMO2_THROW(InputError, "--resume without a directory needs --save-dir");
  if (o.log_format != "text" && o.log_format != "json") {
    OLMO2_THROW(InputError, "--log-format must be text or json, got \"", o.log_format, "\"");
  }
  if (o.on_nonfinite != "skip" && o.on_nonfinite != "stop") {
    OLMO2_THROW(InputError, "--on-nonfinite must be skip or stop, got \"", o.on_nonfinite, "\"");
  }
  LrSchedule s{o.lr, o.warmup_steps, o.steps, o.min_lr_ratio, parse_schedule(o.schedule)};
  s.validate();
}

nlohmann::json StepRecord::to_json() const {
  return {{"step", step},       {"loss", loss},       {"z_loss", z_loss},
          {"grad_norm", grad_norm}, {"lr", lr},       {"tokens", tokens},
          {"target_tokens", target_tokens}, {"step_time", seconds},
          {"tokens_per_second", tokens_per_second}, {"skipped", skipped}};
}


Trainer::Trainer(TrainOptions o) : options_(std::move(o)) {
  validate(options_);
  const TrainOptions& opt = options_;
  // Which checkpoint to resume from, if any (decided first: it defines the model).
  std::string resume_dir;
  if (opt.resume == "auto") {
    resume_dir = latest_checkpoint(opt.save_dir);
  } else if (!opt.resume.empty()) {
    if (!fs::is_directory(opt.resume)) OLMO2_THROW(InputError, "--resume: no checkpoint directory ", opt.resume);
    resume_dir = opt.resume;
  }
  ModelConfig config = opt.model_config.empty() ? ModelConfig::load(opt.model_dir) : ModelConfig::load_file(opt.model_config);
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
    config = saved;
  } else if (opt.resume == "auto") {
    std::cerr << "no checkpoint in " << opt.save_dir << " yet: starting from step 0\n";
  }
  if (opt.seq_len > config.max_position_embeddings) {
    OLMO2_THROW(InputError, "--seq-len ", opt.seq_len, " exceeds the model's context (max_position_embeddings ",
                config.max_position_embeddings, ")");
  }
  DataLoaderOptions dl{opt.seq_len, opt.global_batch, opt.seed, config.vocab_size};
  loader_ = std::make_unique<DataLoader>(opt.data, dl);
  loader_->check_token_ids();
  if (!opt.tokenizer.empty()) {
    const Tokenizer tok = Tokenizer::from_file(opt.tokenizer);  // refuse a non-tokenizer now
    if (tok.vocab_size() > config.vocab_size) {
      OLMO2_THROW(InputError, "--tokenizer ", opt.tokenizer, " has ", tok.vocab_size(),
                  " tokens, more than the model's vocab_size ", config.vocab_size);
    }
  }
  if (!opt.save_dir.empty()) lock_save_dir(resume_dir);
  schedule_ = LrSchedule{opt.lr, opt.warmup_steps, opt.steps, opt.min_lr_ratio, parse_schedule(opt.schedule)};

  if (!resume_dir.empty() || !opt.model_dir.empty()) {
    model_ = std::make_unique<Olmo2Model>(Olmo2Model::load(resume_dir.empty() ? opt.model_dir : resume_dir));
  } else {
    model_ = std::make_unique<Olmo2Model>(
        Olmo2Model::from_weights(config, ShardSpec::whole(config), zero_weights(config, ShardSpec::whole(config))));
  }
  grads_ = zeros_like_weights(model_->weights());
  params_ = list_parameters(model_->mutable_weights(), grads_, model_->config(), model_->shard());
  if (resume_dir.empty() && opt.model_dir.empty()) init_parameters(params_, opt.seed, opt.init_std);
  optimizer_ = std::make_unique<AdamW>(params_, AdamWOptions{opt.beta1, opt.beta2, opt.eps, opt.weight_decay});
  if (!resume_dir.empty()) resume_from(resume_dir);
}

Trainer::~Trainer() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void Trainer::lock_save_dir(const std::string& resume_dir) {
  const std::string& dir = options_.save_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    OLMO2_THROW(InputError, "--save-dir ", dir, ": cannot create the directory (",
                ec ? ec.message() : "not a directory", ")");
  }
  const std::string lock = dir + "/.lock";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) OLMO2_THROW(InputError, "--save-dir ", dir, ": cannot write ", lock, " (", std::strerror(errno), ")");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    OLMO2_THROW(InputError, "--save-dir ", dir, " is in use by another olmo2 train (", lock,
                " is locked); give each run its own --save-dir");
  }
  const std::string latest = latest_checkpoint(dir);
  if (!latest.empty() && (resume_dir.empty() || fs::canonical(resume_dir).parent_path() != fs::canonical(dir))) {
    OLMO2_THROW(InputError, "--save-dir ", dir, " already holds checkpoints of another run (newest ", latest,
                "); give --resume to continue it, or another --save-dir");
  }
}

void Trainer::resume_from(const std::string& dir) {
  const TrainingState st = load_training_state(dir);
  const nlohmann::json& j = st.state;
  try {
    step_ = j.at("step").get<int64_t>();
    skipped_ = j.at("skipped_steps").get<int64_t>();
    nonfinite_ = j.at("nonfinite_steps").get<int64_t>();
    tokens_ = j.at("tokens").get<int64_t>();
    loader_->restore(j.at("data_loader").get<DataLoaderState>());
    const int64_t micro = j.at("micro_batch").get<int64_t>();
    if (micro != (options_.micro_batch ? options_.micro_batch : options_.global_batch)) {
      OLMO2_THROW(InputError, "--resume ", dir, ": the checkpoint was trained with micro-batch ", micro,
                  "; resuming with another changes the summation order (give --micro-batch ", micro, ")");
    }
  } catch (const nlohmann::json::exception& e) {
    OLMO2_THROW(InputError, "--resume ", dir, ": training_state.json: ", e.what());
  }
  std::vector<Tensor> moments;
  std::map<std::string, TensorView> views;
  for (const auto& [name, view] : optimizer_->state_tensors()) {
    moments.push_back(st.load_f32(name, view.shape()));
    views.emplace(name, moments.back().view());
  }
  optimizer_->restore(views, j.value("optimizer_steps", int64_t{-1}));
  if (step_ >= options_.steps) {
    OLMO2_THROW(InputError, "--resume ", dir, ": the checkpoint is at step ", step_, " and --steps is ",
                options_.steps, ": nothing to do (raise --steps to train further)");
  }
  std::cerr << "resumed from " << dir << " at step " << step_ << "\n";
  const nlohmann::json now = state_json().at("schedule");
  if (j.contains("schedule") && j.at("schedule") != now) {
    std::cerr << "note: the learning-rate schedule differs from the checkpoint's (" << j.at("schedule").dump()
              << " -> " << now.dump() << "); the run continues with the new one\n";
  }
}

nlohmann::json Trainer::state_json() const {
  const int64_t micro = options_.micro_batch ? options_.micro_batch : options_.global_batch;
  return {{"step", step_},
          {"optimizer_steps", optimizer_->steps()},
          {"tokens", tokens_},
          {"skipped_steps", skipped_},
          {"nonfinite_steps", nonfinite_},
          {"seed", options_.seed},
          {"micro_batch", micro},
          {"data_loader", loader_->state()},
          {"schedule", {{"kind", options_.schedule}, {"peak_lr", options_.lr}, {"warmup_steps", options_.warmup_steps},
                        {"total_steps", options_.steps}, {"min_lr_ratio", options_.min_lr_ratio}}},
          {"z_loss", options_.z_loss},
          {"rng", {{"note", "no stochastic ops: init and data order derive from seed"}, {"seed", options_.seed}}}};
}

StepRecord Trainer::step() {
  const auto t0 = std::chrono::steady_clock::now();
  const TrainOptions& o = options_;
  const int64_t micro = o.micro_batch ? o.micro_batch : o.global_batch;
  const int64_t n_micro = o.global_batch / micro;
  std::vector<std::vector<Sample>> batches;
  int64_t count = 0;
  for (int64_t m = 0; m < n_micro; ++m) {
    batches.push_back(loader_->batch(0, 1, m, micro));
    count += count_targets(batches.back());
  }
  StepRecord r;
  r.step = step_ + 1;
  r.target_tokens = count;
  r.lr = schedule_.lr(step_);
  for (const Parameter& p : params_) std::fill(p.grad->f32(), p.grad->f32() + p.numel(), 0.0f);
  double factor = r.step == o.debug_scale_step ? o.debug_scale_factor : 1.0;
  LossSums sums;
  if (count > 0) {
    const float scale = static_cast<float>(factor / static_cast<double>(count));
    for (const auto& b : batches) sums += forward_backward(*model_, grads_, b, static_cast<float>(o.z_loss), scale);
    r.loss = factor * sums.ce_sum / static_cast<double>(count);
    r.z_loss = factor * o.z_loss * sums.z_sq_sum / static_cast<double>(count);
  }
  r.grad_norm = std::sqrt(grad_norm_squared_local(params_, true));
  if (!std::isfinite(r.loss) || !std::isfinite(r.z_loss) || !std::isfinite(r.grad_norm)) {
    ++nonfinite_;
    if (o.on_nonfinite == "stop") {
      OLMO2_THROW(TrainingStopped, "step ", r.step, ": non-finite ",
                  std::isfinite(r.loss) ? "gradient" : "loss", " (loss ", r.loss, ", grad norm ", r.grad_norm,
                  "); stopping with the weights of step ", step_, " unchanged (--on-nonfinite stop)");
    }
    ++skipped_;
    r.skipped = true;
  } else if (count > 0) {
    clip_grad_norm(params_, r.grad_norm, o.clip_grad);
    optimizer_->step(params_, r.lr);
  }
  loader_->advance();
  ++step_;
  tokens_ += o.global_batch * o.seq_len;
  r.tokens = tokens_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens_per_second = static_cast<double>(o.global_batch * o.seq_len) / r.seconds;
  return r;
}

std::string Trainer::save() {
  OLMO2_CHECK(!options_.save_dir.empty(), "save() without --save-dir");
  CheckpointContents c;
  c.config = model_->config();
  c.config.dtype = DType::F32;
  for (const Parameter& p : params_) c.model_tensors.emplace_back(p.name, p.value->view());
  c.state_tensors = optimizer_->state_tensors();
  c.state = state_json();
  if (!options_.tokenizer.empty()) {
    c.tokenizer_file = options_.tokenizer;
  } else if (!options_.model_dir.empty() && fs::is_regular_file(options_.model_dir + "/tokenizer.json")) {
    c.tokenizer_file = options_.model_dir + "/tokenizer.json";
  }
  return save_checkpoint(options_.save_dir, step_, c, options_.keep);
}

void Trainer::run(const std::function<bool()>& stop_requested) {
  const TrainOptions& o = options_;
  const bool json = o.log_format == "json";
  int64_t last_saved = -1;
  // The text line shows the step's loss and, like Megatron's log, the mean over the
  // steps since the previous line (single-batch losses are noisy).
  double loss_sum = 0;
  int64_t loss_n = 0;
  if (o.save_dir.empty()) std::cerr << "note: no --save-dir: no checkpoint will be written\n";
  while (step_ < o.steps) {
    StepRecord r;
    try {
      r = step();
    } catch (const TrainingStopped&) {
      if (!o.save_dir.empty()) std::cerr << "saved the unchanged weights: " << save() << "\n";
      throw;
    }
    if (json) std::cout << r.to_json().dump() << std::endl;
    if (!r.skipped) loss_sum += r.loss, ++loss_n;
    if (r.step % o.log_interval == 0 || r.step == o.steps || r.skipped || r.step == 1) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "step %lld/%lld  loss %.4f (mean of %lld: %.4f)  z_loss %.3g  grad_norm %.3f  lr %.3g  "
                    "%.0f tok/s%s\n",
                    static_cast<long long>(r.step), static_cast<long long>(o.steps), r.loss,
                    static_cast<long long>(loss_n), loss_n ? loss_sum / static_cast<double>(loss_n) : 0.0,
                    r.z_loss, r.grad_norm, r.lr, r.tokens_per_second, r.skipped ? "  SKIPPED (non-finite)" : "");
      std::cerr << line << std::flush;
      loss_sum = 0, loss_n = 0;
    }
    const bool stop = (stop_requested && stop_requested()) || step_ == o.debug_stop_after;
    if (!o.save_dir.empty() && ((o.save_interval > 0 && step_ % o.save_interval == 0) || step_ == o.steps || stop)) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::string path = save();
      last_saved = step_;
      std::cerr << "saved " << path << " ("
                << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s)\n";
    }
    if (stop) {
      std::cerr << "stop requested: stopped after step " << step_
                << (last_saved == step_ ? " (checkpoint written)" : "") << "\n";
      return;
    }
  }
}

}  // namespace olmo2
