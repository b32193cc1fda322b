// The bf16-weight product y = bf16(x)·wᵀ (ops::linear_batch_invariant with a bf16 w) on
// every code path this CPU has (ops/bf16_gemm.h), against OpenBLAS sgemm and this
// machine's memory bandwidth, all in one run: GFLOP/s of a large product per path (the
// peak of each path), sgemm GFLOP/s, and GB/s of bf16 weights streamed by decode-shaped
// products (M = 1 and 8 rows, the 1B model's shapes) next to memcpy's GB/s; then the
// training products (ops::linear and ops::linear_backward with a bf16 w, the 1B model's
// shapes, M = 512..2048 rows) on the batch-invariant path against the onednn path. Not a
// test; bench/README.md, "bf16 products".
//
//   build/bench/olmo2_bf16_gemm_bench [--threads N] [--training-only]   (default: all cores)
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ops/backward.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/bf16_gemm.h"
#include "ops/gemm.h"
#include "ops/threads.h"
#include "ops/blas_core.h"

namespace {

using olmo2::Tensor;
using olmo2::TensorView;
using olmo2::ops::Bf16GemmPath;
namespace ops = olmo2::ops;

// Far beyond the last-level cache (260 MiB on the machine of bench/README.md).
constexpr int64_t kPoolBytes = int64_t{1} << 30;

// The 1-, 5- and 15-minute load averages (Linux), to judge how quiet the machine was.
std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return f ? a + " " + b + " " + c : "unknown";
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The shortest of at least `reps` runs of `fn`, continuing until `min_total` seconds.
double best_seconds(const std::function<void()>& fn, int reps, double min_total) {
  fn();  // warm-up
  double best = 1e300, total = 0;
  for (int r = 0; r < reps || total < min_total; ++r) {
    const double t0 = now();
    fn();
    const double t = now() - t0;
    best = std::min(best, t), total += t;
  }
  return best;
}

// memcpy of kPoolBytes, each thread its slice: bytes read + written per second.
double copy_gbs() {
  std::vector<char> src(kPoolBytes, 1), dst(kPoolBytes, 0);
  const double t = best_seconds(
      [&] {
#pragma omp parallel
        {
          const int64_t slice = kPoolBytes / omp_get_num_threads(),
                        off = slice * omp_get_thread_num();
          std::memcpy(dst.data() + off, src.data() + off, static_cast<size_t>(slice));
        }
      },
      3, 1.0);
  return 2.0 * kPoolBytes / t * 1e-9;
}

Tensor random_f32(int64_t m, int64_t k, uint32_t seed) {
  Tensor t = Tensor::zeros({m, k});
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = float(int32_t(seed = seed * 1664525u + 1013904223u)) * 0x1p-31f;
  return t;
}

// bf16 values in (−1, 1), cheap to make in bulk.
Tensor random_bf16(int64_t rows, int64_t k) {
  Tensor t = Tensor::zeros({rows, k}, olmo2::DType::BF16);
  auto* b = static_cast<uint16_t*>(t.view().data());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    b[i] = olmo2::f32_to_bf16(float(int32_t(h)) * 0x1p-31f);
  }
  return t;
}

double large_gflops(int64_t s) {
  const Tensor x = random_f32(s, s, 1), w = random_bf16(s, s);
  Tensor y = Tensor::zeros({s, s});
  const double t =
      best_seconds([&] { ops::linear_batch_invariant(x.view(), w.view(), y.view()); }, 2, 1.0);
  return ops::linear_flops(s, s, s) / t * 1e-9;
}

// GB/s of w for M rows times each of the pool's copies of an [N, K] weight in turn (up to
// max_bytes of them), so that every w comes from memory, timed call by call: the best
// and the median call (a busy machine slows some calls by whole scheduler slices).
struct Rate {
  double best, median;
};
Rate decode_gbs(const Tensor& pool, int64_t max_bytes, int64_t m, int64_t n, int64_t k) {
  const int64_t copies = std::max<int64_t>(1, std::min(pool.numel(), max_bytes / 2) / (n * k));
  auto* base = static_cast<uint16_t*>(pool.view().data());
  const Tensor x = random_f32(m, k, 2);
  Tensor y = Tensor::zeros({m, n});
  std::vector<double> times;
  const double start = now();
  for (int round = 0; round < 4 || now() - start < 0.5; ++round)
    for (int64_t c = 0; c < copies; ++c) {
      const double t0 = now();
      ops::linear_batch_invariant(
          x.view(), TensorView(base + c * n * k, olmo2::DType::BF16, {n, k}), y.view());
      if (round > 0) times.push_back(now() - t0);  // round 0 warms up
    }
  std::sort(times.begin(), times.end());
  const double bytes = 2.0 * n * k;
  return {bytes / times.front() * 1e-9, bytes / times[times.size() / 2] * 1e-9};
}

// GFLOP/s of a large product on the onednn path (ops::linear; it never computes
// linear_batch_invariant).
double onednn_large_gflops(int64_t s) {
  const Tensor x = random_f32(s, s, 1), w = random_bf16(s, s);
  Tensor y = Tensor::zeros({s, s});
  ops::set_bf16_gemm_path(Bf16GemmPath::OneDnn);
  const double t = best_seconds([&] { ops::linear(x.view(), w.view(), y.view()); }, 2, 1.0);
  ops::reset_bf16_gemm_path();
  return ops::linear_flops(s, s, s) / t * 1e-9;
}

// GFLOP/s of the training products on `path`: forward y = bf16(x)·wᵀ, dx = dy·w, dw += dyᵀ·x.
struct Training {
  double forward, dx, dw;
};
Training training_gflops(Bf16GemmPath path, int64_t m, int64_t n, int64_t k) {
  const Tensor x = random_f32(m, k, 3), dy = random_f32(m, n, 4), w = random_bf16(n, k);
  Tensor y = Tensor::zeros({m, n}), dx = Tensor::zeros({m, k}), dw = Tensor::zeros({n, k});
  ops::set_bf16_gemm_path(path);
  const double flops = ops::linear_flops(m, n, k) * 1e-9;
  const double f = best_seconds([&] { ops::linear(x.view(), w.view(), y.view()); }, 2, 0.5);
  const double d = best_seconds([&] { ops::linear_backward(x.view(), w.view(), dy.view(), dx.view(), {}); }, 2, 0.5);
  const double g = best_seconds([&] { ops::linear_backward(x.view(), w.view(), dy.view(), {}, dw.view()); }, 2, 0.5);
  ops::reset_bf16_gemm_path();
  return {flops / f, flops / d, flops / g};
}

void training_table() {
  const Bf16GemmPath ours = ops::bf16_gemm_path();
  std::printf("\ntraining products (ops::linear / linear_backward, bf16 w), GFLOP/s; %s = the batch-invariant\n"
              "path's forward + f32 sgemm backward (OpenBLAS %s), onednn = oneDNN %s; default training path: %s\n",
              ops::bf16_gemm_path_name(ours), openblas_get_corename(), ops::onednn_cpu_isa_name(),
              ops::bf16_training_gemm_path_description().c_str());
  std::printf("%-5s %-6s %-6s | %-22s | %-22s | %-22s\n", "M", "N", "K", "forward ours / onednn",
              "dx ours / onednn", "dw ours / onednn");
  const int64_t shapes[][2] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};  // N, K
  for (int64_t m : {512, 1024, 2048})
    for (const auto& [n, k] : shapes) {
      const Training a = training_gflops(ours, m, n, k), b = training_gflops(Bf16GemmPath::OneDnn, m, n, k);
      std::printf("%-5lld %-6lld %-6lld | %8.1f / %8.1f    | %8.1f / %8.1f    | %8.1f / %8.1f\n", (long long)m,
                  (long long)n, (long long)k, a.forward, b.forward, a.dx, b.dx, a.dw, b.dw);
      std::fflush(stdout);
    }
}

int run(int argc, char** argv) {
  bool training_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) olmo2::set_num_threads(std::atoi(argv[++i]));
    else if (a == "--training-only") training_only = true;
  }
  if (training_only) {
    std::printf("load average: %s; %d threads\n", load_average().c_str(), olmo2::num_threads());
    std::printf("onednn 2048x2048x2048 (ops::linear): %.1f GFLOP/s\n", onednn_large_gflops(2048));
    training_table();
    std::printf("load average at the end: %s\n", load_average().c_str());
    return 0;
  }
  const char* env = std::getenv("OLMO2_BF16_GEMM");
  std::printf("load average: %s\n", load_average().c_str());
  std::printf("bf16 products: default path %s (OLMO2_BF16_GEMM %s), %d threads; paths on this CPU:",
              ops::bf16_gemm_path_name(), env ? env : "unset", olmo2::num_threads());
  std::vector<Bf16GemmPath> paths;
  for (Bf16GemmPath p : {Bf16GemmPath::Avx512Bf16, Bf16GemmPath::Avx2, Bf16GemmPath::Portable})
    if (ops::bf16_gemm_path_available(p))
      paths.push_back(p), std::printf(" %s", ops::bf16_gemm_path_name(p));
  const double copy = copy_gbs();
  std::printf("\nmemcpy of %lld MiB: %.1f GB/s (bytes read + written)\n",
              (long long)(kPoolBytes >> 20), copy);
  std::printf(
      "fp32 OpenBLAS sgemm (ops::linear, f32 w; OpenBLAS core %s) 2048x2048x2048: %.1f GFLOP/s\n",
      openblas_get_corename(), ops::measure_linear_flops(2048, 3) * 1e-9);

  std::printf("\nlarge bf16 product, GFLOP/s\n%-11s %-15s %8s\n", "path", "MxNxK", "GFLOP/s");
  for (Bf16GemmPath p : paths) {
    ops::set_bf16_gemm_path(p);
    const int64_t s = p == Bf16GemmPath::Portable ? 512 : 2048;  // the scalar path is slow
    const std::string shape = std::to_string(s) + "x" + std::to_string(s) + "x" + std::to_string(s);
    std::printf("%-11s %-15s %8.1f\n", ops::bf16_gemm_path_name(p), shape.c_str(), large_gflops(s));
  }
  std::printf("%-11s %-15s %8.1f   (ops::linear only: not batch-invariant)\n", "onednn", "2048x2048x2048",
              onednn_large_gflops(2048));

  const Tensor pool = random_bf16(kPoolBytes / 2 / 2048, 2048);
  const int64_t shapes[][2] = {{2048, 2048}, {8192, 2048}, {16384, 2048}, {2048, 8192}};  // N, K
  std::printf(
      "\ndecode (1B shapes), GB/s of bf16 w from memory per call: best (%% of memcpy's %.1f) / "
      "median\n%-11s %2s",
      copy, "path", "M");
  for (const auto& [n, k] : shapes) std::printf("  N=%-5lld K=%-6lld", (long long)n, (long long)k);
  std::printf("\n");
  for (Bf16GemmPath p : paths) {
    ops::set_bf16_gemm_path(p);
    // The scalar path is compute-bound: 16 MiB of w (from the cache) times it well enough.
    const int64_t bytes = p == Bf16GemmPath::Portable ? int64_t{16} << 20 : kPoolBytes;
    for (int64_t m : {1, 8}) {
      std::printf("%-11s %2lld", ops::bf16_gemm_path_name(p), (long long)m);
      for (const auto& [n, k] : shapes) {
        const Rate g = decode_gbs(pool, bytes, m, n, k);
        std::printf("  %5.1f (%3.0f%%) %5.1f", g.best, 100 * g.best / copy, g.median);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  ops::reset_bf16_gemm_path();
  training_table();
  std::printf("load average at the end: %s\n", load_average().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  olmo2::restart_with_blas_kernels(argv);  // as olmo2 does: OpenBLAS on this CPU's kernels
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // e.g. a bad OLMO2_BF16_GEMM
    std::fprintf(stderr, "olmo2_bf16_gemm_bench: %s\n", e.what());
    return 1;
  }
}
