// Shared pieces of olmo2_train_bench: the command line, the model sizes, the FLOP formula
// and the sgemm peak (train_bench_common.h).
#include "train_bench_common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "ops/gemm.h"
#include "ops/tensor.h"

namespace olmo2::bench {

namespace {

/// Prints `msg` and the usage (stderr, or stdout when status is 0) and exits with `status`.
[[noreturn]] void usage_error(const std::string& msg, int status = 2) {
  std::fprintf(status ? stderr : stdout,
               "olmo2_train_bench: %s\n"
               "usage: olmo2_train_bench [--sizes demo,wide|FILE.json,...] [--steps 3] [--seq-len 128]\n"
               "         [--batch 8] [--micro-batch B] [--threads N] [--sgemm-size 2048] [--sgemm-reps 3]\n"
               "         [--demo-config PATH] [--precision fp32|bf16]\n"
               "       mpirun -np W olmo2_train_bench --tp T --pp P [--dp D] [--sizes demo] [--steps 3] [--warmup 1]\n"
               "         [--seq-len 128] [--batch 8] [--micro-batch M] [--zero-stage 0|1|2|3] [--pp-virtual V] [--threads N] [--tmp-dir DIR]\n"
               "         [--precision fp32|bf16]\n",
               msg.c_str());
  std::exit(status);
}

/// The value of `flag` as an integer ≥ 1, else a usage error.
int64_t parse_positive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1) usage_error(flag + ": expected a positive integer, got '" + v + "'");
  return n;
}

}  // namespace

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else if (flag == "--help" || flag == "-h") {
      usage_error("training-step throughput and MFU (bench/README.md)", 0);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage_error(flag + " needs a value");
    }
    if (flag == "--sizes") {
      o.sizes.clear();
      std::stringstream ss(value);
      for (std::string s; std::getline(ss, s, ',');) if (!s.empty()) o.sizes.push_back(s);
      if (o.sizes.empty()) usage_error("--sizes: empty");
      o.sizes_given = true;
    } else if (flag == "--tp" || flag == "--pp" || flag == "--dp") {
      const int n = static_cast<int>(std::min<int64_t>(parse_positive(flag, value), 1 << 20));
      (flag == "--tp" ? o.tp : flag == "--pp" ? o.pp : o.dp) = n;
      o.distributed = true;
    } else if (flag == "--zero-stage") {
      if (value.size() != 1 || value[0] < '0' || value[0] > '3') {
        usage_error("--zero-stage: expected 0, 1, 2 or 3, got '" + value + "'");
      }
      o.zero_stage = value[0] - '0';
    } else if (flag == "--pp-virtual") {
      o.pp_virtual = static_cast<int>(std::min<int64_t>(parse_positive(flag, value), 1 << 20));
    } else if (flag == "--warmup") o.warmup = parse_positive(flag, value);
    else if (flag == "--tmp-dir") o.tmp_dir = value;
    else if (flag == "--steps") o.steps = parse_positive(flag, value);
    else if (flag == "--seq-len") o.seq_len = parse_positive(flag, value);
    else if (flag == "--batch") o.batch = parse_positive(flag, value);
    else if (flag == "--micro-batch") o.micro_batch = parse_positive(flag, value);
    else if (flag == "--threads") o.threads = static_cast<int>(std::min<int64_t>(parse_positive(flag, value), 4096));
    else if (flag == "--sgemm-size") o.sgemm_size = parse_positive(flag, value);
    else if (flag == "--sgemm-reps") o.sgemm_reps = parse_positive(flag, value);
    else if (flag == "--demo-config") o.demo_config = value;
    else if (flag == "--precision") {
      if (value != "fp32" && value != "bf16") usage_error("--precision: expected fp32 or bf16, got '" + value + "'");
      o.precision = value;
    }
    else usage_error("unknown flag " + flag);
  }
  if (o.seq_len < 2) usage_error("--seq-len must be at least 2 (one target per sequence)");
  if (o.distributed) {
    if (!o.sizes_given) o.sizes = {"demo"};
    if (o.sizes.size() != 1) usage_error("--sizes: the distributed mode takes one size");
    return o;  // the micro-batch default needs dp (run_distributed)
  }
  if (o.micro_batch == 0) o.micro_batch = o.batch;
  if (o.batch % o.micro_batch != 0) usage_error("--micro-batch must divide --batch");
  return o;
}

ModelConfig size_config(const std::string& size, const Options& o) {
  if (size == "demo") return ModelConfig::load_file(o.demo_config);
  if (size != "wide") return ModelConfig::load_file(size);
  ModelConfig c;
  c.vocab_size = 100352;
  c.hidden_size = 512;
  c.intermediate_size = 1536;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 8;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 500000.0;
  c.tie_word_embeddings = false;
  return c;
}

double matmul_weights(const ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.num_attention_heads * c.head_dim),
               kv = static_cast<double>(c.num_key_value_heads * c.head_dim),
               inter = static_cast<double>(c.intermediate_size);
  return static_cast<double>(c.num_hidden_layers) * (2 * h * q + 2 * h * kv + 3 * h * inter) +
         static_cast<double>(c.vocab_size) * h;
}

double train_step_flops(const ModelConfig& c, int64_t sequences, int64_t t) {
  const double tokens = static_cast<double>(sequences * t);
  const double attention = 12.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads * c.head_dim) *
                           (static_cast<double>(t) + 1.0) / 2.0;
  return tokens * (6.0 * matmul_weights(c) + attention);
}

double sgemm_gflops(int64_t n, int64_t reps) {
  return olmo2::ops::measure_linear_flops(n, static_cast<int>(reps)) * 1e-9;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  return f >> a >> b >> c ? a + " " + b + " " + c : "unknown";
}

}  // namespace olmo2::bench
