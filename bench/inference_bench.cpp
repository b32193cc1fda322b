// Inference speed of a checkpoint on one process (bench/README.md, "Against PyTorch"):
// prefill of one sequence with last-token logits, as a server's prefill step computes
// it, and batch-1 greedy decode with a KV cache, as `olmo2 generate` drives it; and, in
// the same run, the machine's read bandwidth, which bounds decode from above: bytes read
// per token (weights as held + the KV cache up to the step's position) ÷ read bandwidth
// (bench/decode_accounting.h, bench/memory_bandwidth.h); and where the decode step's time
// goes (products, attention, norms/RoPE/elementwise, other ops, sampling, the rest), from
// the op profile (ops/op_profile.h) taken over the timed steps.
//
//   olmo2_inference_bench --model DIR [--precision fp32|bf16] [--threads N]
//       [--prefill 128,512] [--reps 3] [--warmup 1] [--decode-prompt 128]
//       [--decode-steps 64] [--decode-reps 1] [--bandwidth-mib 1024] [--batch-invariant]
//       [--device cpu|cuda]
//
// With --device cuda the weights, KV cache and activations are on GPU 0 and each step
// ends with its logits row copied to the host (which waits for the GPU); the copy
// bandwidth printed is still the host's — the GPU bound is scripts/gpu_bench.sh's, from
// olmo2_gpu_peaks' device copy bandwidth and weight_bytes_per_token — and the breakdown
// counts GPU ops' launches, not their work (it is printed for the CPU only).
//
// Every figure is wall-clock time through the model's public API: Olmo2Model::forward
// with a contiguous KVCache (KVCache::contiguous + contiguous_table, as
// runtime/generation/generate.cpp does) and ForwardOptions::last_logits_only. Token ids
// are uniform random (fixed seed). Prints a human summary and one JSON line per figure
// ("bench":"olmo2_inference_bench") on stdout; progress on stderr.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/decode_accounting.h"
#include "bench/memory_bandwidth.h"
#include "ops/bf16_gemm.h"
#include "ops/device_runtime.h"
#include "ops/dtype.h"
#include "ops/tensor_ops.h"
#include "ops/tensor.h"
#include "ops/threads.h"
#include "runtime/model/config.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/model.h"
#include "runtime/model/precision.h"
#include "runtime/model/quantized_weights.h"
#include "ops/blas_core.h"

namespace {

using Clock = std::chrono::steady_clock;
using olmo2::Olmo2Model;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Options {
  std::string model;
  std::string precision;  // "": the checkpoint's default
  std::string weights;    // "": as held; "int8" or "int4": quantized at load (runtime/model/quantized_weights.h)
  std::string kv_cache_dtype = "auto";
  int threads = 0;        // 0: all hardware threads
  std::vector<int64_t> prefill{128, 512};
  int64_t reps = 3, warmup = 1;
  int64_t decode_prompt = 128, decode_steps = 64, decode_reps = 1;
  int64_t bandwidth_mib = 1024;
  bool batch_invariant = false;
  olmo2::Device device = olmo2::Device::CPU;
};

[[noreturn]] void usage(const std::string& msg, int status = 2) {
  std::fprintf(status ? stderr : stdout,
               "olmo2_inference_bench: %s\n"
               "usage: olmo2_inference_bench --model DIR [--precision fp32|bf16] [--threads N]\n"
               "         [--prefill 128,512] [--reps 3] [--warmup 1] [--decode-prompt 128] [--decode-steps 64]\n"
               "         [--decode-reps 1] [--bandwidth-mib 1024] [--batch-invariant]\n"
               "         [--weights int8|int4] [--kv-cache-dtype auto|bf16|f32]\n"
               "  --prefill ''  or  --decode-steps 0  leaves that part out\n",
               msg.c_str());
  std::exit(status);
}

int64_t parse_count(const std::string& flag, const std::string& v, int64_t min) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < min) usage(flag + ": expected an integer >= " + std::to_string(min) + ", got '" + v + "'");
  return n;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") usage("inference speed of a checkpoint (bench/README.md)", 0);
    if (flag == "--batch-invariant") {
      o.batch_invariant = true;
      continue;
    }
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage(flag + " needs a value");
    }
    if (flag == "--model") o.model = value;
    else if (flag == "--precision") o.precision = value;
    else if (flag == "--weights") o.weights = value;
    else if (flag == "--kv-cache-dtype") o.kv_cache_dtype = value;
    else if (flag == "--device") {
      if (value != "cpu" && value != "cuda") usage("--device: expected cpu or cuda, got '" + value + "'", 2);
      o.device = value == "cuda" ? olmo2::Device::CUDA : olmo2::Device::CPU;
    }
    else if (flag == "--threads") o.threads = static_cast<int>(std::min<int64_t>(parse_count(flag, value, 1), 4096));
    else if (flag == "--prefill") {
      o.prefill.clear();
      std::stringstream ss(value);
      for (std::string s; std::getline(ss, s, ',');)
        if (!s.empty()) o.prefill.push_back(parse_count(flag, s, 1));
    } else if (flag == "--reps") o.reps = parse_count(flag, value, 1);
    else if (flag == "--warmup") o.warmup = parse_count(flag, value, 0);
    else if (flag == "--decode-prompt") o.decode_prompt = parse_count(flag, value, 1);
    else if (flag == "--decode-steps") o.decode_steps = parse_count(flag, value, 0);
    else if (flag == "--decode-reps") o.decode_reps = parse_count(flag, value, 1);
    else if (flag == "--bandwidth-mib") o.bandwidth_mib = parse_count(flag, value, 0);
    else usage("unknown flag " + flag);
  }
  if (o.model.empty()) usage("--model is required");
  return o;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  return f >> a >> b >> c ? a + " " + b + " " + c : "unknown";
}

/// The id with the largest logit of a [1, V] f32 row (greedy; the first on ties).
int32_t argmax(const olmo2::Tensor& logits) {
  const float* p = logits.f32();
  const int64_t v = logits.numel();
  return static_cast<int32_t>(std::max_element(p, p + v) - p);
}

struct Stat {
  double mean = 0, best = 1e300;
  std::vector<double> all;
  void add(double s) {
    all.push_back(s);
    best = std::min(best, s);
    mean = std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(all.size());
  }
};

}  // namespace

int main(int argc, char** argv) {
  olmo2::restart_with_blas_kernels(argv);  // as olmo2 does: OpenBLAS on this CPU's kernels
  const Options o = parse_args(argc, argv);
  try {
    const int threads = o.threads ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    olmo2::set_num_threads(threads);
    const olmo2::ModelConfig config = olmo2::ModelConfig::load(o.model);
    const olmo2::Precision precision =
        o.precision.empty() ? olmo2::default_precision(config.dtype) : olmo2::parse_precision(o.precision, "--precision");
    std::optional<olmo2::WeightQuantization> quantization;
    if (!o.weights.empty() && o.weights != "auto")
      quantization = olmo2::resolved({olmo2::parse_quant_format(o.weights, "--weights"), 0}, config);
    const olmo2::DType kv_dtype =
        olmo2::kv_cache_dtype(olmo2::parse_kv_cache_dtype(o.kv_cache_dtype, "--kv-cache-dtype"), precision);
    // Batch-invariant runs take linear_batch_invariant, the others ops::linear (ops/bf16_gemm.h).
    const std::string path = precision != olmo2::Precision::BF16 ? std::string("OpenBLAS sgemm (") + openblas_get_corename() + ")"
                             : o.batch_invariant ? std::string(olmo2::ops::bf16_gemm_path_name())
                                                 : olmo2::ops::bf16_training_gemm_path_description();
    std::printf("olmo2_inference_bench: %s, precision %s, threads %d, load average %s\n", o.model.c_str(),
                olmo2::precision_name(precision), threads, load_average().c_str());
    std::printf("  products: %s%s\n", path.c_str(), o.batch_invariant ? " [batch-invariant: ops::linear_batch_invariant]" : "");
    if (quantization) std::printf("  weights: %s\n", olmo2::quantization_text(*quantization).c_str());
    std::printf("  KV cache: %s\n", olmo2::dtype_name(kv_dtype));
    std::fflush(stdout);

    const int64_t bw_bytes = o.bandwidth_mib << 20;
    std::fprintf(stderr, "read and copy bandwidth (%lld MiB)...\n", static_cast<long long>(o.bandwidth_mib));
    const olmo2::bench::Bandwidth read_before = olmo2::bench::read_bandwidth(bw_bytes, threads, 5);
    const olmo2::bench::Bandwidth copy_before = olmo2::bench::copy_bandwidth(bw_bytes, threads, 5);

    std::fprintf(stderr, "loading %s in %s...\n", o.model.c_str(), olmo2::precision_name(precision));
    const auto tl = Clock::now();
    if (o.device == olmo2::Device::CUDA) {
      std::string why;
      if (olmo2::ops::gpu_count(&why) == 0) throw std::runtime_error("--device cuda: no GPU (" + why + ")");
      olmo2::ops::use_gpu(0, "olmo2_inference_bench");
      std::printf("  device: cuda, GPU 0 (%s)\n", olmo2::ops::gpu_description(0).c_str());
    }
    const Olmo2Model model = Olmo2Model::load(o.model, olmo2::ShardSpec::whole(config), precision, o.device, quantization);
    const double load_s = seconds_since(tl);
    const double wbytes = olmo2::bench::weight_bytes_per_token(model);

    int64_t capacity = o.decode_steps > 0 ? o.decode_prompt + 1 + o.decode_steps : 1;  // + the untimed step
    for (int64_t t : o.prefill) capacity = std::max(capacity, t);
    if (capacity > config.max_position_embeddings) {
      throw std::runtime_error("prefill/decode length " + std::to_string(capacity) + " exceeds max_position_embeddings " +
                               std::to_string(config.max_position_embeddings));
    }
    const olmo2::KVCache cache = olmo2::KVCache::contiguous(config, model.shard(), capacity, 16, o.device, kv_dtype);
    const std::vector<int32_t> table = cache.contiguous_table(capacity);  // every KV group's blocks
    olmo2::ForwardOptions fo;
    fo.last_logits_only = true;
    fo.batch_invariant = o.batch_invariant;
    std::mt19937 rng(42);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(std::min<int64_t>(config.vocab_size, 50000) - 1));
    auto random_ids = [&](int64_t n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (int32_t& x : v) x = id(rng);
      return v;
    };
    // One forward of `ids` after `start` cached positions; returns its last-token logits.
    auto step = [&](const std::vector<int32_t>& ids, int64_t start) {
      olmo2::TokenBatch batch;
      batch.tokens.emplace_back(ids);
      batch.start.push_back(start);
      batch.block_tables.emplace_back(table);
      olmo2::Tensor logits = std::move(model.forward(batch, &cache, fo).logits[0]);
      if (logits.device() == olmo2::Device::CPU) return logits;
      olmo2::Tensor host = olmo2::Tensor::zeros(logits.shape(), logits.dtype());
      olmo2::ops::copy(logits.view(), host.view());  // waits for the GPU: the step's time includes its work
      return host;
    };

    nlohmann::json base = {{"bench", "olmo2_inference_bench"}, {"model", o.model},
                           {"precision", olmo2::precision_name(precision)}, {"threads", threads},
                           {"product_path", path}, {"batch_invariant", o.batch_invariant},
                           {"weights", quantization ? olmo2::ops::quant_format_name(quantization->format)
                                                    : olmo2::precision_name(precision)},
                           {"kv_cache_dtype", olmo2::dtype_name(kv_dtype)}};
    std::vector<nlohmann::json> out;

    for (int64_t t : o.prefill) {
      Stat st;
      for (int64_t r = 0; r < o.warmup + o.reps; ++r) {
        const std::vector<int32_t> ids = random_ids(t);
        const auto t0 = Clock::now();
        const olmo2::Tensor logits = step(ids, 0);
        const double s = seconds_since(t0);
        std::fprintf(stderr, "prefill T=%lld %s %lld: %.3f s (next id %d)\n", static_cast<long long>(t),
                     r < o.warmup ? "warm-up" : "rep", static_cast<long long>(r), s, argmax(logits));
        if (r >= o.warmup) st.add(s);
      }
      nlohmann::json j = base;
      j.update({{"kind", "prefill"}, {"tokens", t}, {"seconds", st.mean}, {"best_seconds", st.best},
                {"runs", st.all}, {"tokens_per_s", static_cast<double>(t) / st.mean}});
      out.push_back(j);
    }

    if (o.decode_steps > 0) {
      Stat st;
      std::vector<double> steps_s;
      double kv_bytes = 0, sampling_s = 0;  // summed over the timed steps
      (void)olmo2::ops::take_op_profile();
      for (int64_t r = 0; r < o.decode_reps; ++r) {
        const std::vector<int32_t> prompt = random_ids(o.decode_prompt);
        int32_t next = argmax(step(prompt, 0));  // the prompt's prefill, untimed
        int64_t cached = o.decode_prompt;
        // One untimed decode step first (first-touch of the step's buffers).
        next = argmax(step({next}, cached++));
        olmo2::ops::set_op_profiling(true);  // the timed steps only
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < o.decode_steps; ++i) {
          kv_bytes += olmo2::bench::kv_bytes_read(model, cache, cached);  // a few adds per layer
          const auto ts = Clock::now();
          const olmo2::Tensor logits = step({next}, cached++);
          const auto tsample = Clock::now();
          next = argmax(logits);
          sampling_s += seconds_since(tsample);
          steps_s.push_back(seconds_since(ts));
        }
        const double s = seconds_since(t0);
        olmo2::ops::set_op_profiling(false);
        std::fprintf(stderr, "decode %lld steps after %lld: %.3f s, %.2f tokens/s\n",
                     static_cast<long long>(o.decode_steps), static_cast<long long>(o.decode_prompt), s,
                     static_cast<double>(o.decode_steps) / s);
        st.add(s);
      }
      const double all_steps_s = std::accumulate(steps_s.begin(), steps_s.end(), 0.0);
      const olmo2::bench::StepBreakdown parts = olmo2::bench::classify(olmo2::ops::take_op_profile(), all_steps_s, sampling_s);
      std::sort(steps_s.begin(), steps_s.end());
      const olmo2::bench::Bandwidth read_after = olmo2::bench::read_bandwidth(bw_bytes, threads, 5);
      const olmo2::bench::Bandwidth copy_after = olmo2::bench::copy_bandwidth(bw_bytes, threads, 5);
      const double bw = std::max(read_before.best, read_after.best);
      const double tps = static_cast<double>(o.decode_steps) / st.mean;
      const double kv_per_token = kv_bytes / static_cast<double>(steps_s.size());
      const double bytes_per_token = wbytes + kv_per_token;
      const double bound = bw > 0 ? bw / bytes_per_token : 0;
      const double n = static_cast<double>(steps_s.size());
      nlohmann::json j = base;
      j.update({{"kind", "decode"}, {"prompt", o.decode_prompt}, {"steps", o.decode_steps}, {"seconds", st.mean},
                {"runs", st.all}, {"tokens_per_s", tps}, {"step_ms_median", 1e3 * steps_s[steps_s.size() / 2]},
                {"weight_bytes_per_token", wbytes}, {"kv_bytes_per_token", kv_per_token},
                {"bytes_per_token", bytes_per_token}, {"read_bandwidth_bytes_per_s", bw},
                {"read_bandwidth_before", {read_before.best, read_before.median}},
                {"read_bandwidth_after", {read_after.best, read_after.median}}, {"read_loads", read_before.loads},
                {"copy_bandwidth_bytes_per_s", std::max(copy_before.best, copy_after.best)},
                {"bound_tokens_per_s", bound}, {"fraction_of_bound", bound > 0 ? tps / bound : 0.0},
                {"step_ms", {{"products", 1e3 * parts.products / n}, {"attention", 1e3 * parts.attention / n},
                             {"elementwise", 1e3 * parts.elementwise / n}, {"other_ops", 1e3 * parts.other_ops / n},
                             {"sampling", 1e3 * parts.sampling / n}, {"outside", 1e3 * parts.outside / n},
                             {"total", 1e3 * parts.total / n}}}});
      if (o.device == olmo2::Device::CPU) j["breakdown"] = olmo2::bench::describe(parts, static_cast<int64_t>(n));
      out.push_back(j);
    }

    std::printf("  load %.1f s; weights read per decode token %.3f GB; read bandwidth %.1f GB/s best, %.1f median"
                " (%s loads, %d threads, %lld MiB); copy %.1f GB/s\n",
                load_s, wbytes * 1e-9, read_before.best * 1e-9, read_before.median * 1e-9, read_before.loads, threads,
                static_cast<long long>(o.bandwidth_mib), copy_before.best * 1e-9);
    for (const nlohmann::json& j : out) {
      if (j["kind"] == "prefill") {
        std::printf("  prefill T=%-5lld %9.2f tokens/s  (mean %.3f s, best %.3f s over %lld)\n",
                    static_cast<long long>(j["tokens"].get<int64_t>()), j["tokens_per_s"].get<double>(),
                    j["seconds"].get<double>(), j["best_seconds"].get<double>(), static_cast<long long>(o.reps));
      } else {
        std::printf("  decode %lld steps  %9.2f tokens/s  (median step %.1f ms); bound %.2f tokens/s"
                    " (%.3f GB read per token at %.1f GB/s read): %.1f%%\n",
                    static_cast<long long>(o.decode_steps), j["tokens_per_s"].get<double>(),
                    j["step_ms_median"].get<double>(), j["bound_tokens_per_s"].get<double>(),
                    j["bytes_per_token"].get<double>() * 1e-9, j["read_bandwidth_bytes_per_s"].get<double>() * 1e-9,
                    100.0 * j["fraction_of_bound"].get<double>());
        if (j.contains("breakdown")) std::printf("  decode step: %s\n", j["breakdown"].get<std::string>().c_str());
      }
    }
    for (nlohmann::json& j : out) {
      j["load_seconds"] = load_s;
      std::printf("%s\n", j.dump().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "olmo2_inference_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
