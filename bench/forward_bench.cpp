// Forward throughput of a 1B-shaped OLMo 2 model (random f32 weights built in memory)
// against OpenBLAS sgemm at the model's matrix-product shapes, in one run.
//
//   olmo2_bench [--threads N] [Google Benchmark flags]
//
// Benchmarks:
//   BM_Forward/T          batch 1, one sequence of T tokens (128, 512), full logits
//   BM_Sgemm/M/N/K        y[M,N] = x[M,K]·w[N,K]ᵀ through ops::linear (cblas_sgemm), at
//                         the lm_head shape (512, 100352, 2048) — the largest — and the
//                         MLP shape (512, 8192, 2048)
// After the runs a summary prints the forward's achieved GFLOP/s (Olmo2Model::forward_flops
// with the causal average context (T+1)/2) as a fraction of sgemm's.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ops/gemm.h"
#include "ops/tensor.h"
#include "ops/threads.h"
#include "runtime/model/config.h"
#include "runtime/model/model.h"
#include "ops/blas_core.h"

namespace {

using olmo2::ModelConfig;
using olmo2::Olmo2Model;
using olmo2::Tensor;

constexpr int64_t kExpectedParameters = 1484916736;  // allenai/OLMo-2-0425-1B

/// The OLMo-2-0425-1B shape (untied embeddings).
ModelConfig olmo2_1b_config() {
  ModelConfig c;
  c.vocab_size = 100352;
  c.hidden_size = 2048;
  c.intermediate_size = 8192;
  c.num_hidden_layers = 16;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 16;
  c.head_dim = 128;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 500000.0;
  c.tie_word_embeddings = false;
  c.dtype = olmo2::DType::F32;
  return c;
}

/// The model, built on first use and shared by every benchmark (~6 GB of f32).
const Olmo2Model& model() {
  static const std::unique_ptr<Olmo2Model> m = [] {
    std::fprintf(stderr, "building random 1B-shaped model in memory (%.2f GB f32)...\n",
                 4.0 * static_cast<double>(kExpectedParameters) / 1e9);
    return std::make_unique<Olmo2Model>(Olmo2Model::random(olmo2_1b_config(), /*seed=*/1234));
  }();
  return *m;
}

/// Fills a tensor with uniform values in [-1, 1) from a cheap fixed-seed generator.
void fill_uniform(const Tensor& t, uint64_t seed) {
  std::minstd_rand rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
}

void BM_Forward(benchmark::State& state) {
  const Olmo2Model& m = model();
  const int64_t t_len = state.range(0);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(m.config().vocab_size - 1));
  std::vector<std::vector<int32_t>> batch(1);
  for (int64_t i = 0; i < t_len; ++i) batch[0].push_back(id(rng));

  benchmark::DoNotOptimize(m.forward(batch));  // warm-up, untimed
  for (auto _ : state) {
    olmo2::ForwardResult r = m.forward(batch);
    benchmark::DoNotOptimize(r.logits[0].f32());
    benchmark::ClobberMemory();
  }
  const double flops = m.forward_flops(t_len, (static_cast<double>(t_len) + 1.0) / 2.0);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(t_len), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Sgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const Tensor x = Tensor::zeros({m, k}), w = Tensor::zeros({n, k}), y = Tensor::zeros({m, n});
  fill_uniform(x, 1);
  fill_uniform(w, 2);
  olmo2::ops::linear(x.view(), w.view(), y.view());  // warm-up, untimed
  for (auto _ : state) {
    olmo2::ops::linear(x.view(), w.view(), y.view());
    benchmark::DoNotOptimize(y.f32());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(olmo2::ops::linear_flops(m, n, k) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// Real (wall) time: OpenBLAS and OpenMP threads make process CPU time meaningless here.
// Fixed iteration counts keep the whole run to a few minutes on 2 cores.
BENCHMARK(BM_Forward)->Arg(128)->Arg(512)->Iterations(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sgemm)
    ->ArgNames({"M", "N", "K"})
    ->Args({512, 100352, 2048})  // lm_head: the largest product of the model
    ->Args({512, 8192, 2048})    // gate/up: the dominant per-layer shape
    ->Iterations(3)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

/// Displays through the reporter --benchmark_format asks for and keeps each run's
/// counters (mean over repetitions) for the summary.
class CapturingReporter : public benchmark::BenchmarkReporter {
 public:
  explicit CapturingReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner)
      : inner_(std::move(inner)) {}
  bool ReportContext(const Context& context) override { return inner_->ReportContext(context); }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      Stat& s = stats[r.run_name.function_name + "/" + r.run_name.args];
      for (const auto& [name, counter] : r.counters) s.sum[name] += counter.value;
      s.n += 1;
    }
    inner_->ReportRuns(runs);
  }
  void Finalize() override { inner_->Finalize(); }

  struct Stat {
    std::map<std::string, double> sum;  ///< per counter
    int n = 0;
    double mean(const std::string& counter) const {
      auto it = sum.find(counter);
      return n && it != sum.end() ? it->second / n : 0.0;
    }
  };
  std::map<std::string, Stat> stats;  ///< key: "BM_Forward/128", "BM_Sgemm/M:512/N:100352/K:2048"

 private:
  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
};

/// Removes "--threads N" / "--threads=N" from argv; returns N or 0 when absent.
int take_threads_flag(int& argc, char** argv) {
  int threads = 0, out = 1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* value = nullptr;
    if (std::strcmp(a, "--threads") == 0) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "--threads needs a value\n");
        std::exit(2);
      }
      value = argv[++i];
    } else if (std::strncmp(a, "--threads=", 10) == 0) {
      value = a + 10;
    } else {
      argv[out++] = argv[i];
      continue;
    }
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || n < 1 || n > 4096) {
      std::fprintf(stderr, "--threads: expected a positive integer, got '%s'\n", value);
      std::exit(2);
    }
    threads = static_cast<int>(n);
  }
  argc = out;
  argv[argc] = nullptr;
  return threads;
}

/// The value of --benchmark_format (console by default).
std::string display_format(int argc, char** argv) {
  std::string format = "console";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_format=", 19) == 0) format = argv[i] + 19;
  }
  return format;
}

/// The display reporter for `format`.
std::unique_ptr<benchmark::BenchmarkReporter> display_reporter(const std::string& format) {
  if (format == "json") return std::make_unique<benchmark::JSONReporter>();
  return std::make_unique<benchmark::ConsoleReporter>(
      isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                            : benchmark::ConsoleReporter::OO_Tabular);
}

}  // namespace

int main(int argc, char** argv) {
  olmo2::restart_with_blas_kernels(argv);  // as olmo2 does: OpenBLAS on this CPU's kernels
  int threads = take_threads_flag(argc, argv);
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  olmo2::set_num_threads(threads);

  const ModelConfig config = olmo2_1b_config();
  if (config.parameter_count() != kExpectedParameters) {
    std::fprintf(stderr, "config has %lld parameters, expected %lld\n",
                 static_cast<long long>(config.parameter_count()),
                 static_cast<long long>(kExpectedParameters));
    return 1;
  }

  const std::string corename = openblas_get_corename();
  benchmark::AddCustomContext("threads", std::to_string(threads));
  benchmark::AddCustomContext("openblas_core", corename);
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  benchmark::AddCustomContext("model", "OLMo-2-0425-1B shape, " +
                                           std::to_string(config.parameter_count()) +
                                           " parameters, f32, random");

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const std::string format = display_format(argc, argv);
  CapturingReporter reporter(display_reporter(format));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  // Summary (stderr when the display is machine-readable, so stdout stays parseable).
  FILE* out = format == "console" ? stdout : stderr;
  auto find = [&](const std::string& key, const std::string& counter = "GFLOP/s") -> double {
    auto it = reporter.stats.find(key);
    return it == reporter.stats.end() ? 0.0 : it->second.mean(counter);
  };
  const double sgemm_head = find("BM_Sgemm/M:512/N:100352/K:2048");
  const double sgemm_mlp = find("BM_Sgemm/M:512/N:8192/K:2048");
  std::fprintf(out, "\nsummary (threads %d, OpenBLAS core %s)\n", threads, corename.c_str());
  if (sgemm_head > 0) std::fprintf(out, "  sgemm 512x100352x2048 (lm_head)         %8.1f GFLOP/s\n", sgemm_head);
  if (sgemm_mlp > 0) std::fprintf(out, "  sgemm 512x8192x2048   (mlp)             %8.1f GFLOP/s\n", sgemm_mlp);
  for (const int64_t t : {128, 512}) {
    const double fwd = find("BM_Forward/" + std::to_string(t));
    if (fwd <= 0) continue;
    std::fprintf(out, "  forward T=%-4lld %8.1f tokens/s  %8.1f GFLOP/s", static_cast<long long>(t),
                 find("BM_Forward/" + std::to_string(t), "tokens/s"), fwd);
    if (sgemm_head > 0) std::fprintf(out, "  = %5.1f%% of lm_head sgemm", 100.0 * fwd / sgemm_head);
    if (sgemm_mlp > 0) std::fprintf(out, ", %5.1f%% of mlp sgemm", 100.0 * fwd / sgemm_mlp);
    std::fprintf(out, "\n");
  }
  return 0;
}
