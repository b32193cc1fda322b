#include "launcher/train_options.h"

#include <cstdlib>

#include "launcher/device_options.h"
#include "launcher/options.h"
#include "runtime/serve/memory_size.h"

namespace olmo2 {

namespace po = boost::program_options;

void add_train_options(po::options_description& d) {
  d.add_options()
      ("model", po::value<std::string>(), "continue from this HF checkpoint directory")
      ("model-config", po::value<std::string>(), "config.json of a model to train from scratch")
      ("tokenizer", po::value<std::string>(), "tokenizer.json copied into checkpoints (for generate --prompt)")
      ("data", po::value<std::vector<std::string>>()->multitoken(), ".npy token files (uint32/uint16)")
      ("seq-len", po::value<int64_t>(), "tokens per sequence")
      ("global-batch", po::value<int64_t>(), "sequences per optimizer step")
      ("micro-batch", po::value<int64_t>(), "sequences per forward/backward (default: global batch)")
      ("steps", po::value<int64_t>(), "optimizer steps")
      ("lr", po::value<double>(), "peak learning rate (default 4e-4)")
      ("min-lr-ratio", po::value<double>(), "final lr as a fraction of peak (default 0.1)")
      ("warmup-steps", po::value<int64_t>(), "linear warm-up steps (default 0)")
      ("schedule", po::value<std::string>(), "cosine, linear or constant (default cosine)")
      ("weight-decay", po::value<double>(), "AdamW decoupled weight decay (default 0.1; not on the embedding)")
      ("beta1", po::value<double>(), "AdamW beta1 (default 0.9)")
      ("beta2", po::value<double>(), "AdamW beta2 (default 0.95)")
      ("adam-eps", po::value<double>(), "AdamW epsilon (default 1e-8)")
      ("clip-grad", po::value<double>(), "global grad-norm clipping (default 1.0; 0: off)")
      ("z-loss", po::value<double>(), "Z-loss coefficient (default 1e-5)")
      ("init-std", po::value<double>(), "truncated-normal init std (default 0.02)")
      ("seed", po::value<uint64_t>(), "seed of the initialisation and the data order (default 0)")
      ("save-dir", po::value<std::string>(), "checkpoint directory")
      ("save-interval", po::value<int64_t>(), "steps between checkpoints (default: only at the end)")
      ("keep", po::value<int>(), "newest checkpoints kept (default 3; 0: all)")
      ("resume", po::value<std::string>()->implicit_value("auto"),
       "resume from DIR, or without a value from the newest checkpoint in --save-dir (if any)")
      ("resume-fallback", po::value<bool>()->implicit_value(true),
       "when the checkpoint to resume fails verification (checksums, state), resume from the newest older one that passes")
      ("log-interval", po::value<int64_t>(), "steps between progress lines on stderr (default 1)")
      ("log-format", po::value<std::string>(), "text, or json: one JSON object per step on stdout")
      ("on-nonfinite", po::value<std::string>(), "skip (default) or stop on a NaN/Inf loss or gradient")
      ("debug-scale-loss", po::value<std::string>(), "STEP:FACTOR multiplies one step's loss (testing)")
      ("debug-stop-after", po::value<int64_t>(), "stop after step N as on SIGTERM (testing)")
      ("debug-scale-rank", po::value<int>(), "apply --debug-scale-loss on this world rank only (testing)")
      ("zero-stage", po::value<int>(), "shard over data-parallel ranks (needs dp > 1): 1 the AdamW state (ZeRO-1), 2 also the gradients, 3 also the parameters; default 0")
      ("precision", po::value<std::string>(), "fp32 (default) or bf16: bf16 compute with f32 master weights, moments and gradients")
      ("grad-bucket-mb", po::value<int64_t>(), "data-parallel gradient all-reduce bucket in MiB (default 25)")
      ("overlap", po::value<std::string>(), "on (default): reduce data-parallel gradient buckets while the backward runs; "
       "off: after it (the same results)")
      ("memory-per-rank", po::value<std::string>(),
       "memory of one rank, e.g. 80GB: refuse to start when the memory plan (olmo2 plan) of any rank exceeds it")
      ("recompute", po::value<std::string>(), "activations each layer keeps for its backward: none (default: all), "
       "selective (recompute attention, QK-norm, RoPE) or full (the layer's input only); the same results, less memory")
      ("spike-window", po::value<int64_t>(), "steps of the rolling loss / grad-norm spike window (default 128)")
      ("spike-sigma", po::value<double>(), "a spike is above mean + sigma * std of the window (default 6)")
      ("skip-spikes", po::value<bool>()->implicit_value(true), "do not apply a step whose loss or grad norm spikes")
      ("metrics-port", po::value<int>(), "serve Prometheus metrics of every rank on this port, from rank 0; 0: any free "
       "port, named in the start line and --port-file (default: off)")
      ("data-changed", po::value<std::string>(),
       "ok: a resume may read other --data than the checkpoint's run did (else refused, naming the file)")
      ("allow-eos-mismatch", po::value<bool>()->implicit_value(true),
       "train although the model config's eos_token_id lacks the tokenizer's end-of-text token or the --data "
       "tokenize.json's eos_id (a warning instead of an error)")
      ("port-file", po::value<std::string>(), "write the metrics endpoints' HOST:PORT there once they listen, one a line")
      ("metrics-host", po::value<std::string>(), "address the metrics endpoint listens on (default 127.0.0.1)")
      ("metrics-per-node", po::value<bool>()->implicit_value(true),
       "one metrics endpoint on each node's first rank, for that node's ranks (default: one, on rank 0)")
      ("diag-interval", po::value<int64_t>(), "steps between per-layer diagnostics in the metrics (default 10)")
      ("peak-tflops", po::value<double>(), "peak TFLOP/s per node for MFU (default: an sgemm measured at start, noisy on a busy machine)");
}

TrainOptions read_train_options(const po::variables_map& vm) {
  TrainOptions o;
  auto str = [&](const char* k, std::string& f) { if (vm.count(k)) f = vm[k].as<std::string>(); };
  auto i64 = [&](const char* k, int64_t& f) { if (vm.count(k)) f = vm[k].as<int64_t>(); };
  auto dbl = [&](const char* k, double& f) { if (vm.count(k)) f = vm[k].as<double>(); };
  str("model", o.model_dir), str("model-config", o.model_config), str("tokenizer", o.tokenizer);
  if (vm.count("data")) o.data = vm["data"].as<std::vector<std::string>>();
  for (const char* required : {"seq-len", "global-batch", "steps"}) {
    if (!vm.count(required)) OLMO2_THROW(UsageError, "train: --", required, " is required");
  }
  i64("seq-len", o.seq_len), i64("global-batch", o.global_batch), i64("micro-batch", o.micro_batch);
  i64("steps", o.steps), i64("warmup-steps", o.warmup_steps), i64("save-interval", o.save_interval);
  i64("log-interval", o.log_interval), i64("debug-stop-after", o.debug_stop_after);
  dbl("lr", o.lr), dbl("min-lr-ratio", o.min_lr_ratio), dbl("weight-decay", o.weight_decay);
  dbl("beta1", o.beta1), dbl("beta2", o.beta2), dbl("adam-eps", o.eps), dbl("clip-grad", o.clip_grad);
  dbl("z-loss", o.z_loss), dbl("init-std", o.init_std);
  str("schedule", o.schedule), str("save-dir", o.save_dir), str("resume", o.resume);
  str("log-format", o.log_format), str("on-nonfinite", o.on_nonfinite);
  if (vm.count("seed")) o.seed = vm["seed"].as<uint64_t>();
  if (vm.count("debug-scale-rank")) o.debug_scale_rank = vm["debug-scale-rank"].as<int>();
  if (vm.count("zero-stage")) o.zero_stage = vm["zero-stage"].as<int>();
  if (vm.count("precision")) o.precision = vm["precision"].as<std::string>();
  str("recompute", o.recompute);
  i64("grad-bucket-mb", o.grad_bucket_mb);
  if (vm.count("overlap")) {
    try {  // a command-line mistake: exit 2 from every rank's first check, like --schedule's
      o.overlap = parse_overlap(vm["overlap"].as<std::string>(), "--overlap");
    } catch (const InputError& e) {
      OLMO2_THROW(UsageError, "train: ", e.what());
    }
  }
  if (vm.count("memory-per-rank")) {
    try {
      o.memory_per_rank = parse_memory_size(vm["memory-per-rank"].as<std::string>(), "--memory-per-rank");
    } catch (const InputError& e) {
      OLMO2_THROW(UsageError, e.what());
    }
  }
  i64("spike-window", o.spike_window);
  if (vm.count("metrics-port")) {
    o.metrics_port = vm["metrics-port"].as<int>();
    if (o.metrics_port < 0 || o.metrics_port > 65535) {
      OLMO2_THROW(UsageError, "--metrics-port must be a TCP port (1-65535, or 0: any free one), got ", o.metrics_port);
    }
  }
  str("port-file", o.port_file);
  str("data-changed", o.data_changed);
  str("metrics-host", o.metrics_host);
  if (vm.count("metrics-per-node")) o.metrics_per_node = vm["metrics-per-node"].as<bool>();
  i64("diag-interval", o.diag_interval);
  dbl("peak-tflops", o.peak_tflops);
  dbl("spike-sigma", o.spike_sigma);
  if (vm.count("skip-spikes")) o.skip_spikes = vm["skip-spikes"].as<bool>();
  if (vm.count("resume-fallback")) o.resume_fallback = vm["resume-fallback"].as<bool>();
  if (vm.count("allow-eos-mismatch")) o.allow_eos_mismatch = vm["allow-eos-mismatch"].as<bool>();
  if (vm.count("keep")) o.keep = vm["keep"].as<int>();
  if (vm.count("micro-batch") && o.micro_batch < 1) {
    OLMO2_THROW(UsageError, "--micro-batch must be at least 1, got ", o.micro_batch);
  }
  if (vm.count("debug-scale-loss")) {
    const std::string s = vm["debug-scale-loss"].as<std::string>();
    const size_t colon = s.find(':');
    char* end = nullptr;
    const long long step = colon == std::string::npos ? 0 : std::strtoll(s.c_str(), &end, 10);
    if (colon == std::string::npos || end != s.c_str() + colon || step < 1) {
      OLMO2_THROW(UsageError, "--debug-scale-loss: \"", s, "\" is not STEP:FACTOR (STEP ≥ 1)");
    }
    const std::string f = s.substr(colon + 1);
    const double factor = std::strtod(f.c_str(), &end);
    if (f.empty() || *end != '\0') OLMO2_THROW(UsageError, "--debug-scale-loss: bad factor \"", f, "\"");
    o.debug_scale_step = step, o.debug_scale_factor = factor;
  }
  if (vm.count("save-dir") && o.save_dir.empty()) OLMO2_THROW(UsageError, "--save-dir is empty");
  o.device = read_device_options(vm).device;
  try {
    validate(o);
  } catch (const InputError& e) {  // an inconsistent command line: exit 2 like any usage error
    OLMO2_THROW(UsageError, "train: ", e.what());
  }
  return o;
}

}  // namespace olmo2
