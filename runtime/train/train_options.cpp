#include "runtime/train/train_options.h"

#include "runtime/model/decoder_layer.h"
#include "runtime/model/precision.h"

#include "core/error.h"
#include "monitoring/spike_detector.h"
#include "ops/device_emulation.h"
#include "runtime/train/lr_schedule.h"

namespace olmo2 {

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
  if (o.resume_fallback && o.resume.empty()) OLMO2_THROW(InputError, "--resume-fallback needs --resume");
  if (o.log_format != "text" && o.log_format != "json") {
    OLMO2_THROW(InputError, "--log-format must be text or json, got \"", o.log_format, "\"");
  }
  if (o.on_nonfinite != "skip" && o.on_nonfinite != "stop") {
    OLMO2_THROW(InputError, "--on-nonfinite must be skip or stop, got \"", o.on_nonfinite, "\"");
  }
  parse_precision(o.precision, "--precision");
#ifndef OLMO2_HAVE_CUDA
  if (o.device == Device::CUDA && !ops::device_emulated()) {
    OLMO2_THROW(InputError, "--device cuda: this build has no CUDA backend (nvcc was not found when it was configured)");
  }
#endif
  if (o.zero_stage < 0 || o.zero_stage > 3) {
    OLMO2_THROW(InputError, "--zero-stage must be 0, 1, 2 or 3 (ZeRO-1: AdamW state, 2: and gradients, 3: and "
                "parameters sharded over DP), got ", o.zero_stage);
  }
  parse_recompute(o.recompute, "--recompute");
  if (o.grad_bucket_mb < 1) OLMO2_THROW(InputError, "--grad-bucket-mb must be at least 1, got ", o.grad_bucket_mb);
  monitoring::SpikeDetector check_spike_options("loss", o.spike_window, o.spike_sigma);
  if (!o.data_changed.empty() && o.data_changed != "ok") {
    OLMO2_THROW(InputError, "--data-changed must be ok (a resume may read other data), got \"", o.data_changed, "\"");
  }
  if (o.metrics_port < -1 || o.metrics_port > 65535) {
    OLMO2_THROW(InputError, "--metrics-port must be a TCP port (1-65535, or 0: any free one), got ", o.metrics_port);
  }
  if (!o.port_file.empty() && o.metrics_port < 0) {
    OLMO2_THROW(InputError, "--port-file ", o.port_file, " names where the metrics port goes: give --metrics-port too");
  }
  if (o.diag_interval < 1) OLMO2_THROW(InputError, "--diag-interval must be at least 1, got ", o.diag_interval);
  if (!(o.peak_tflops >= 0)) OLMO2_THROW(InputError, "--peak-tflops must be ≥ 0 (0: measure), got ", o.peak_tflops);
  LrSchedule s{o.lr, o.warmup_steps, o.steps, o.min_lr_ratio, parse_schedule(o.schedule)};
  s.validate();
}

bool parse_overlap(const std::string& text, const std::string& option) {
  if (text != "on" && text != "off") OLMO2_THROW(InputError, option, " must be on or off, got \"", text, "\"");
  return text == "on";
}

}  // namespace olmo2
