// Causal attention of one prompt (prefill) or of one new token per sequence (decode)
// through ops::paged_attention, timed wall and CPU; one line per case for
// bench/attention_vs_sdpa.sh, which alternates it with PyTorch's
// scaled_dot_product_attention on the same shapes (bench/README.md, "Prefill
// attention"). Not a test.
//
//   olmo2_attention_bench prefill T ACT [REPS] [HEADS] [KV_HEADS] [HD]
//   olmo2_attention_bench decode SEQS CTX ACT [REPS] [HEADS] [KV_HEADS] [HD]
//   olmo2_attention_bench chunk SEQS CTX ROWS ACT [REPS] [HEADS] [KV_HEADS] [HD]
// chunk: SEQS sequences of CTX positions each, the last ROWS of them new (decode is
// ROWS = 1). OLMO2_ATTENTION_BENCH_ROW_MAX=N moves the kernel's one-row path threshold
// (sequences of ≤ N new rows; a huge N runs every row the one-row way, the old kernel's
// walk; 0 tiles every sequence).
// ACT: f32 or bf16 (the rounding of bf16 activations; inputs are bf16 values either way
// for bf16). The thread count is OpenMP's (OMP_NUM_THREADS).
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/dtype.h"
#include "ops/cpu/paged_attention_detail.h"
#include "ops/paged_attention.h"

namespace {

using olmo2::DType;
using olmo2::Tensor;

Tensor uniform(std::vector<int64_t> shape, uint32_t seed, bool bf16) {
  Tensor t = Tensor::zeros(std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = bf16 ? olmo2::round_bf16(dist(rng)) : dist(rng);
  return t;
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int64_t arg(int argc, char** argv, int i, int64_t fallback) {
  return i < argc ? std::stoll(argv[i]) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 3) throw std::invalid_argument("usage: prefill T ACT [REPS] [HEADS] [KV] [HD] | decode SEQS CTX ACT [REPS] [HEADS] [KV] [HD]");
    const std::string mode = argv[1];
    const bool prefill = mode == "prefill", chunk = mode == "chunk";
    if (!prefill && !chunk && mode != "decode")
      throw std::invalid_argument("mode " + mode + ": expected prefill, decode or chunk");
    const int a = prefill ? 3 : chunk ? 5 : 4;  // index of ACT
    const int64_t seqs = prefill ? 1 : arg(argc, argv, 2, 64);
    const int64_t len = prefill ? arg(argc, argv, 2, 2048) : arg(argc, argv, 3, 512);
    const int64_t new_rows = prefill ? len : chunk ? arg(argc, argv, 4, 1) : 1;  // per sequence
    if (new_rows < 1 || new_rows > len) throw std::invalid_argument("ROWS must be in [1, CTX]");
    if (const char* m = std::getenv("OLMO2_ATTENTION_BENCH_ROW_MAX"))
      olmo2::ops::detail::set_row_path_max_rows(std::stoll(m));
    if (a >= argc) throw std::invalid_argument("missing ACT (f32 or bf16)");
    const std::string act_name = argv[a];
    if (act_name != "f32" && act_name != "bf16") throw std::invalid_argument("ACT " + act_name + ": expected f32 or bf16");
    const DType act = act_name == "bf16" ? DType::BF16 : DType::F32;
    const int64_t reps = arg(argc, argv, a + 1, 3), heads = arg(argc, argv, a + 2, 16),
                  kv = arg(argc, argv, a + 3, heads), hd = arg(argc, argv, a + 4, 128), bs = 16;
    if (seqs < 1 || len < 1 || reps < 1 || heads < 1 || kv < 1 || heads % kv != 0 || hd < 1)
      throw std::invalid_argument("bad sizes: sequences, length, reps, heads, kv heads and hd must be ≥ 1, heads % kv = 0");
    const bool bf16 = act == DType::BF16;
    const int64_t rows = seqs * new_rows;  // query rows of the call
    const int64_t blocks_per_seq = (len + bs - 1) / bs;
    const Tensor q = uniform({rows, heads * hd}, 1, bf16), out = Tensor::zeros({rows, heads * hd});
    const Tensor kp = uniform({seqs * blocks_per_seq * bs, kv * hd}, 2, bf16);
    const Tensor vp = uniform({seqs * blocks_per_seq * bs, kv * hd}, 3, bf16);
    std::vector<int32_t> ids(static_cast<size_t>(seqs * blocks_per_seq));
    std::iota(ids.begin(), ids.end(), 0);
    if (!prefill) std::shuffle(ids.begin(), ids.end(), std::mt19937(4));  // a serving pool's scattered blocks
    std::vector<olmo2::ops::PagedSequence> batch;
    for (int64_t s = 0; s < seqs; ++s) {
      const std::span<const int32_t> table(ids.data() + s * blocks_per_seq, static_cast<size_t>(blocks_per_seq));
      batch.push_back(prefill ? olmo2::ops::PagedSequence{0, len, 0, table}
                              : olmo2::ops::PagedSequence{s * new_rows, new_rows, len - new_rows, table});
    }
    auto call = [&] {
      olmo2::ops::paged_attention(q.view(), kp.view(), vp.view(), bs, batch, static_cast<int>(heads),
                                  static_cast<int>(kv), out.view(), act);
    };
    call();  // warm-up
    double best_wall = 1e30, best_cpu = 1e30;
    for (int64_t r = 0; r < reps; ++r) {
      const double c0 = cpu_seconds();
      const auto w0 = std::chrono::steady_clock::now();
      call();
      best_wall = std::min(best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
      best_cpu = std::min(best_cpu, cpu_seconds() - c0);
    }
    // Causal pairs (row, key) × heads × hd × 2 products (q·k, p·v) × 2 flops.
    double pairs = 0;
    for (int64_t t = 0; t < new_rows; ++t) pairs += static_cast<double>(seqs * (len - new_rows + t + 1));
    const double gflop = pairs * static_cast<double>(heads * hd) * 4e-9;
    std::printf("ours %s %s=%lld ctx=%lld rows=%lld row_max=%lld act=%s heads=%lld/%lld hd=%lld threads=%d path=%s wall_ms=%.3f cpu_ms=%.3f gflops=%.1f\n",
                mode.c_str(), prefill ? "T" : "seqs", static_cast<long long>(prefill ? len : seqs),
                static_cast<long long>(len), static_cast<long long>(new_rows),
                static_cast<long long>(olmo2::ops::detail::row_path_max_rows()), act_name.c_str(), static_cast<long long>(heads),
                static_cast<long long>(kv), static_cast<long long>(hd), omp_get_max_threads(),
                olmo2::ops::paged_attention_path_name(olmo2::ops::paged_attention_path()), best_wall * 1e3,
                best_cpu * 1e3, gflop / best_wall);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "olmo2_attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
