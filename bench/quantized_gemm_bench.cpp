// The quantized-weight products (ops::linear_quantized, int8 and int4) against the bf16
// batch-invariant product (ops::linear_batch_invariant with a bf16 w) and this machine's
// read bandwidth, all in one run: batch-1 GB/s of weight bytes read (values + scales,
// QuantizedWeight::bytes()) for the 1B model's shapes, each weight from memory (a pool of
// copies far beyond the last-level cache), as a share of the read bandwidth measured by
// a read-sum over a 1 GiB buffer; then GFLOP/s at M = 16, 128, 512 on each path this CPU
// has, ours and bf16 alternating in the same loop. Not a test; bench/README.md,
// "Quantized products".
//
//   build/bench/olmo2_quantized_gemm_bench [--threads N] [--int8-group G] [--int4-group G]
//                                          [--quick]   (default: all cores, 128, 32)
#include <immintrin.h>
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

#include "ops/batch_invariant_gemm.h"
#include "ops/dtype.h"
#include "ops/gemm.h"
#include "ops/quantized_linear.h"
#include "ops/threads.h"

namespace {

using olmo2::Tensor;
using olmo2::TensorView;
using olmo2::ops::QuantFormat;
using olmo2::ops::QuantizedPath;
using olmo2::ops::QuantizedWeight;
namespace ops = olmo2::ops;

constexpr int64_t kPoolBytes = int64_t{1} << 30;

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return f ? a + " " + b + " " + c : "unknown";
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Read bandwidth: each thread sums its slice of a 1 GiB buffer (64-bit adds in four
// independent AVX2 chains, so the adds never limit it); the best of several passes.
__attribute__((target("avx2"))) double read_gbs() {
  std::vector<uint64_t> buf(kPoolBytes / 8, 1);
  double best = 1e300;
  uint64_t sink = 0;
  for (int pass = 0; pass < 6; ++pass) {
    const double t0 = now();
#pragma omp parallel reduction(+ : sink)
    {
      const int64_t words = kPoolBytes / 8, per = words / omp_get_num_threads();
      const uint64_t* p = buf.data() + per * omp_get_thread_num();
      __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = 0; i + 16 <= per; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
      }
      alignas(32) uint64_t l[4];
      _mm256_store_si256(reinterpret_cast<__m256i*>(l),
                         _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
      sink += l[0] + l[1] + l[2] + l[3];
    }
    if (pass > 0) best = std::min(best, now() - t0);
  }
  if (sink == 42) std::printf(" ");
  return double(kPoolBytes) / best * 1e-9;
}

Tensor random_f32(int64_t m, int64_t k, uint32_t seed) {
  Tensor t = Tensor::zeros({m, k});
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = float(int32_t(seed = seed * 1664525u + 1013904223u)) * 0x1p-31f;
  return t;
}

Tensor random_bf16(int64_t rows, int64_t k) {
  Tensor t = Tensor::zeros({rows, k}, olmo2::DType::BF16);
  auto* b = static_cast<uint16_t*>(t.view().data());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < t.numel(); ++i)
    b[i] = olmo2::f32_to_bf16(float(int32_t(static_cast<uint32_t>(i) * 2654435761u)) * 0x1p-31f);
  return t;
}

QuantizedWeight copy_of(const QuantizedWeight& w) {
  QuantizedWeight c;
  c.format = w.format, c.n = w.n, c.k = w.k, c.group = w.group;
  c.values = Tensor::zeros(w.values.shape(), olmo2::DType::U8);
  c.scales = Tensor::zeros(w.scales.shape(), olmo2::DType::BF16);
  std::memcpy(c.values.view().data(), w.values.view().data(), w.values.view().bytes());
  std::memcpy(c.scales.view().data(), w.scales.view().data(), w.scales.view().bytes());
  return c;
}

struct Rate {
  double best, median;
};
// GB/s (bytes / call time) over calls that each take the next copy, so that every call
// reads its weight from memory; round 0 warms up.
Rate rate(const std::function<void(int64_t)>& call, int64_t copies, double bytes) {
  std::vector<double> times;
  const double start = now();
  for (int round = 0; round < 4 || now() - start < 0.6; ++round)
    for (int64_t c = 0; c < copies; ++c) {
      const double t0 = now();
      call(c);
      if (round > 0) times.push_back(now() - t0);
    }
  std::sort(times.begin(), times.end());
  return {bytes / times.front() * 1e-9, bytes / times[times.size() / 2] * 1e-9};
}

struct Shape {
  const char* name;
  int64_t n, k;
};
const Shape kShapes[] = {{"qkvo", 2048, 2048}, {"gate/up", 8192, 2048}, {"down", 2048, 8192},
                         {"lm_head", 100352, 2048}};

int run(int argc, char** argv) {
  int64_t g8 = 128, g4 = 32;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) olmo2::set_num_threads(std::atoi(argv[++i]));
    else if (a == "--int8-group" && i + 1 < argc) g8 = std::atoll(argv[++i]);
    else if (a == "--int4-group" && i + 1 < argc) g4 = std::atoll(argv[++i]);
    else if (a == "--quick") quick = true;
    else {
      std::fprintf(stderr, "olmo2_quantized_gemm_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::printf("load average: %s; %d threads; quantized path %s; paths on this CPU:", load_average().c_str(),
              olmo2::num_threads(), ops::quantized_path_name(ops::quantized_path()));
  std::vector<QuantizedPath> paths;
  for (QuantizedPath p : {QuantizedPath::Avx512Vnni, QuantizedPath::Avx2, QuantizedPath::Portable})
    if (ops::quantized_path_available(p)) paths.push_back(p), std::printf(" %s", ops::quantized_path_name(p));
  const double bw = read_gbs();
  std::printf("\nread bandwidth (read-sum of 1 GiB, %d threads): %.1f GB/s\n", olmo2::num_threads(), bw);

  // Batch 1 on the fastest path: bf16 then int8 then int4 for each shape, alternating.
  std::printf("\nM = 1, GB/s of weight bytes per call from memory: best (%% of read bandwidth) / median;"
              " time ratio bf16 / ours\n%-8s %-6s %-6s | %-24s | %-24s | %-24s | %s\n",
              "shape", "N", "K", "bf16 (linear_batch_inv.)", ("int8 (group " + std::to_string(g8) + ")").c_str(),
              ("int4 (group " + std::to_string(g4) + ")").c_str(), "bf16÷int8  bf16÷int4");
  for (const Shape& s : kShapes) {
    if (quick && s.n > 10000) continue;
    const Tensor wb = random_bf16(s.n, s.k);
    const QuantizedWeight q8 = ops::quantize_weight(wb.view(), QuantFormat::Int8, g8);
    const QuantizedWeight q4 = ops::quantize_weight(wb.view(), QuantFormat::Int4, g4);
    const int64_t budget = kPoolBytes / 2;
    auto copies_of = [&](int64_t bytes) { return std::max<int64_t>(2, budget / bytes); };
    std::vector<Tensor> b16;
    for (int64_t c = 0; c < copies_of(2 * s.n * s.k); ++c) {
      b16.push_back(Tensor::zeros({s.n, s.k}, olmo2::DType::BF16));
      std::memcpy(b16.back().view().data(), wb.view().data(), wb.view().bytes());
    }
    std::vector<QuantizedWeight> c8, c4;
    for (int64_t c = 0; c < copies_of(q8.bytes()); ++c) c8.push_back(copy_of(q8));
    for (int64_t c = 0; c < copies_of(q4.bytes()); ++c) c4.push_back(copy_of(q4));
    const Tensor x = random_f32(1, s.k, 5);
    Tensor y = Tensor::zeros({1, s.n});
    Rate rb{}, r8{}, r4{};
    for (int rep = 0; rep < 2; ++rep) {  // alternate twice; keep each side's best
      const Rate a = rate([&](int64_t c) { ops::linear_batch_invariant(x.view(), b16[c].view(), y.view()); },
                          int64_t(b16.size()), 2.0 * s.n * s.k);
      const Rate b = rate([&](int64_t c) { ops::linear_quantized(x.view(), c8[c], y.view()); }, int64_t(c8.size()),
                          double(q8.bytes()));
      const Rate d = rate([&](int64_t c) { ops::linear_quantized(x.view(), c4[c], y.view()); }, int64_t(c4.size()),
                          double(q4.bytes()));
      if (a.best > rb.best) rb = a;
      if (b.best > r8.best) r8 = b;
      if (d.best > r4.best) r4 = d;
    }
    const double tb = 2.0 * s.n * s.k / rb.best, t8 = q8.bytes() / r8.best, t4 = q4.bytes() / r4.best;
    std::printf("%-8s %-6lld %-6lld | %5.1f (%3.0f%%) / %5.1f     | %5.1f (%3.0f%%) / %5.1f     | %5.1f (%3.0f%%) / %5.1f"
                "     | %5.2f      %5.2f\n",
                s.name, (long long)s.n, (long long)s.k, rb.best, 100 * rb.best / bw, rb.median, r8.best,
                100 * r8.best / bw, r8.median, r4.best, 100 * r4.best / bw, r4.median, tb / t8, tb / t4);
    std::fflush(stdout);
  }

  // Larger M: GFLOP/s, from the cache's point of view warm (one weight, repeated).
  std::printf("\nM > 1, GFLOP/s (2·M·N·K / time), best of repeated calls, bf16 and ours alternating\n"
              "%-11s %-4s %-6s %-6s | %8s | %8s | %8s | %s\n",
              "path", "M", "N", "K", "bf16", "int8", "int4", "int8÷bf16 int4÷bf16");
  const Shape mshapes[] = {{"qkvo", 2048, 2048}, {"gate/up", 8192, 2048}, {"down", 2048, 8192}};
  for (QuantizedPath p : paths) {
    ops::set_quantized_path(p);
    for (int64_t m : {16, 128, 512}) {
      if (p == QuantizedPath::Portable && m > 16) continue;  // the scalar path is slow
      for (const Shape& s : mshapes) {
        if (quick && s.n == 8192) continue;
        const Tensor wb = random_bf16(s.n, s.k), x = random_f32(m, s.k, 7);
        const QuantizedWeight q8 = ops::quantize_weight(wb.view(), QuantFormat::Int8, g8);
        const QuantizedWeight q4 = ops::quantize_weight(wb.view(), QuantFormat::Int4, g4);
        Tensor y = Tensor::zeros({m, s.n});
        double tb = 1e300, t8 = 1e300, t4 = 1e300;
        const double start = now();
        for (int rep = 0; rep < 3 || now() - start < 1.0; ++rep) {
          double t0 = now();
          ops::linear_batch_invariant(x.view(), wb.view(), y.view());
          tb = std::min(tb, now() - t0), t0 = now();
          ops::linear_quantized(x.view(), q8, y.view());
          t8 = std::min(t8, now() - t0), t0 = now();
          ops::linear_quantized(x.view(), q4, y.view());
          t4 = std::min(t4, now() - t0);
        }
        const double f = ops::linear_flops(m, s.n, s.k) * 1e-9;
        std::printf("%-11s %-4lld %-6lld %-6lld | %8.1f | %8.1f | %8.1f | %5.2f     %5.2f\n",
                    ops::quantized_path_name(p), (long long)m, (long long)s.n, (long long)s.k, f / tb, f / t8,
                    f / t4, tb / t8, tb / t4);
        std::fflush(stdout);
      }
    }
  }
  ops::reset_quantized_path();
  std::printf("load average at the end: %s\n", load_average().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // e.g. a bad OLMO2_QUANT_GEMM
    std::fprintf(stderr, "olmo2_quantized_gemm_bench: %s\n", e.what());
    return 1;
  }
}
