// Serving's batch-invariant kernels against what they replace, in the same run:
// ops::linear_batch_invariant vs OpenBLAS sgemm (ops::linear), the batch-invariant
// product's code paths (avx512, avx2) against each other and sgemm at prefill shapes,
// and a decode step of ops::paged_attention vs ops::causal_attention on contiguous
// caches. Not a test; bench/README.md, "Serving kernels".
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/attention.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/blas_core.h"
#include "ops/gemm.h"
#include "ops/paged_attention.h"

namespace {

using olmo2::Tensor;

Tensor uniform(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t = Tensor::zeros(std::move(shape));
  std::minstd_rand rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::generate(t.f32(), t.f32() + t.numel(), [&] { return dist(rng); });
  return t;
}

template <bool kInvariant>
void BM_Linear(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const Tensor x = uniform({m, k}, 1), w = uniform({n, k}, 2), y = Tensor::zeros({m, n});
  const auto linear = kInvariant ? olmo2::ops::linear_batch_invariant : olmo2::ops::linear;
  linear(x.view(), w.view(), y.view());  // warm-up
  for (auto _ : state) {
    linear(x.view(), w.view(), y.view());
    benchmark::DoNotOptimize(y.f32());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(olmo2::ops::linear_flops(m, n, k) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

/// linear_batch_invariant on one code path (skipped where the CPU lacks it).
template <olmo2::ops::BatchInvariantPath kPath>
void BM_BatchInvariantPath(benchmark::State& state) {
  namespace ops = olmo2::ops;
  if (!ops::batch_invariant_path_available(kPath)) {
    state.SkipWithError((std::string("this CPU lacks ") + ops::batch_invariant_path_name(kPath)).c_str());
    return;
  }
  ops::set_batch_invariant_path(kPath);
  BM_Linear<true>(state);
  ops::reset_batch_invariant_path();
}

/// Decode: `seqs` sequences of `context` cached positions each get one query.
template <bool kPaged>
void BM_DecodeAttention(benchmark::State& state) {
  const int64_t seqs = state.range(0), context = state.range(1), heads = state.range(2), hd = 128, bs = 16;
  const Tensor q = uniform({seqs, heads * hd}, 3), out = Tensor::zeros({seqs, heads * hd});
  const int64_t blocks = seqs * context / bs;
  const Tensor kp = uniform({blocks * bs, heads * hd}, 4), vp = uniform({blocks * bs, heads * hd}, 5);
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(6));
  std::vector<olmo2::ops::PagedSequence> batch;
  for (int64_t s = 0; s < seqs; ++s) {
    batch.push_back({s, 1, context - 1, std::span<const int32_t>(ids).subspan(static_cast<size_t>(s * context / bs),
                                                                              static_cast<size_t>(context / bs))});
  }
  for (auto _ : state) {
    if constexpr (kPaged) {
      olmo2::ops::paged_attention(q.view(), kp.view(), vp.view(), bs, batch, static_cast<int>(heads),
                                  static_cast<int>(heads), out.view());
    } else {  // the same keys and values, one contiguous cache per sequence
      for (int64_t s = 0; s < seqs; ++s) {
        olmo2::ops::causal_attention(q.view().rows(s, s + 1), kp.view().rows(s * context, (s + 1) * context),
                                     vp.view().rows(s * context, (s + 1) * context), static_cast<int>(heads),
                                     static_cast<int>(heads), out.view().rows(s, s + 1));
      }
    }
    benchmark::DoNotOptimize(out.f32());
  }
}

void linear_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K"})
      ->Args({1, 8192, 2048})      // a 1B-shaped gate/up at one decoding sequence
      ->Args({16, 8192, 2048})
      ->Args({64, 8192, 2048})     // 64 sequences decoding
      ->Args({512, 8192, 2048})    // a prefill chunk
      ->Args({64, 100352, 2048})   // 1B lm_head, 64 sequences
      ->Args({64, 100352, 128})    // the demo model's lm_head
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

/// Prefill chunks of 128 and 512 tokens through the 1B model's products: q/o (and k/v,
/// 2048 × 2048 at 1B), gate/up, down, lm_head. One iteration of the largest is ~1 s.
void prefill_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K"});
  for (int64_t m : {128, 512})
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{2048, 2048}, {8192, 2048}, {2048, 8192}, {100352, 2048}})
      b->Args({m, n, k});
  b->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
}

BENCHMARK(BM_Linear<false>)->Name("sgemm")->Apply(linear_shapes);
BENCHMARK(BM_Linear<true>)->Name("batch_invariant")->Apply(linear_shapes);
// Filter with --benchmark_filter=prefill to run only these.
BENCHMARK(BM_Linear<false>)->Name("prefill/sgemm")->Apply(prefill_shapes);
BENCHMARK(BM_BatchInvariantPath<olmo2::ops::BatchInvariantPath::Avx2>)->Name("prefill/batch_invariant_avx2")
    ->Apply(prefill_shapes);
BENCHMARK(BM_BatchInvariantPath<olmo2::ops::BatchInvariantPath::Avx512>)->Name("prefill/batch_invariant_avx512")
    ->Apply(prefill_shapes);
BENCHMARK(BM_DecodeAttention<false>)->Name("causal_attention_decode")->ArgNames({"seqs", "ctx", "heads"})
    ->Args({64, 512, 16})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeAttention<true>)->Name("paged_attention_decode")->ArgNames({"seqs", "ctx", "heads"})
    ->Args({64, 512, 16})->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

// The context block names the OpenBLAS core and the default batch-invariant path.
int main(int argc, char** argv) {
  olmo2::restart_with_blas_kernels(argv);  // as olmo2 does: OpenBLAS on this CPU's kernels
  try {
    benchmark::AddCustomContext("openblas_core", olmo2::blas_core_name());
    benchmark::AddCustomContext("batch_invariant_path", olmo2::ops::batch_invariant_path_name());
  } catch (const std::exception& e) {  // a bad OLMO2_BATCH_INVARIANT_GEMM
    std::fprintf(stderr, "olmo2_serving_kernels_bench: %s\n", e.what());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
