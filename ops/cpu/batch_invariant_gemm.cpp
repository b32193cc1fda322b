// Batch-invariant y = x · wᵀ. Every element y[m, n] is computed by one fixed sequence
// of fp32 operations:
//
//   acc[0..15] = +0
//   for k = 0, 1, …, K-1:  acc[k % 16] = fma(x[m, k], w[n, k], acc[k % 16])
//   s8[j] = acc[j] + acc[j + 8]   (j < 8)
//   s4[j] = s8[j]  + s8[j + 4]    (j < 4)
//   s2[j] = s4[j]  + s4[j + 2]    (j < 2)
//   y[m, n] = s2[0] + s2[1]
//
// Nothing in it depends on M, N, the tile an element falls in, the block split or the
// thread count, so a row's result is the same alone or in any batch. The AVX-512 path
// (ops/cpu/batch_invariant_gemm_avx512.cpp) holds the 16 lanes in one zmm register, the
// AVX2 path lanes 0-7 and 8-15 in two ymm registers (one fma instruction updates eight
// or sixteen lanes with independent fmas, which is the same as that many scalar ones);
// the portable path runs the same sequence with std::fmaf. None writes a·b + c, so
// contraction cannot change a rounding, and without -ffast-math nothing reassociates.
// The vector paths share one driver (blocks of N over threads, blocks of K carrying
// the lanes), which never changes an element's operations.
#include "ops/batch_invariant_gemm.h"
#include "ops/cpu/kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops/cpu/batch_invariant_gemm_detail.h"
#include "ops/cpu/bf16_gemm_detail.h"
#include "ops/cpu/code_path_choice.h"
#include "ops/cpu/lane_tree.h"
#include "core/error.h"

namespace olmo2::ops {
namespace {

constexpr int kLanes = 16;
// Register tile of the AVX2 path: kMr rows of x × kNr rows of w, two accumulators
// each (12 ymm), plus kNr w registers and one x register: 15 of the 16 ymm.
constexpr int kMr = 3;
constexpr int kNr = 2;
// K is walked in blocks of kKc (a multiple of 16, so every block starts on lane 0);
// the lanes are parked in a per-thread buffer between blocks. An x tile of MR × kKc
// then stays in L1 while the w rows stream through it. Fixed, whatever M.
constexpr int64_t kKc = 512;
static_assert(kKc % kLanes == 0);
// The w rows of one N block (nb × K floats) should stay in a core's L2 while every
// x tile passes over them: the AVX2 path's budget (the AVX-512 kernel brings its own).
constexpr int64_t kWBlockBytes = 256 * 1024;
constexpr int64_t kMaxNb = 256;

struct Dims {
  int64_t m, k, n, ldx, ldw, ldy;
};

Dims check_shapes(const TensorView& x, const TensorView& w, const TensorView& y) {
  OLMO2_CHECK(x.dim() == 2 && w.dim() == 2 && y.dim() == 2,
              "linear_batch_invariant wants 2-d views, got x ", x.shape_str(), " w ", w.shape_str(),
              " y ", y.shape_str());
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  OLMO2_CHECK(w.size(1) == k && y.size(0) == m && y.size(1) == n, "linear_batch_invariant: x ",
              x.shape_str(), " · w ", w.shape_str(), "ᵀ -> y ", y.shape_str());
  OLMO2_CHECK(x.stride(1) == 1 && w.stride(1) == 1 && y.stride(1) == 1,
              "linear_batch_invariant needs a contiguous last dimension");
  return {m, k, n, x.stride(0), w.stride(0), y.stride(0)};
}

// The fixed reduction tree over the 16 lanes (see the top of the file). The AVX2
// path's register version below performs the same additions on the same pairs.
float reduce_lanes(const float* acc) {
  float s8[8], s4[4], s2[2];
  for (int j = 0; j < 8; ++j) s8[j] = acc[j] + acc[j + 8];
  for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
  for (int j = 0; j < 2; ++j) s2[j] = s4[j] + s4[j + 2];
  return s2[0] + s2[1];
}

// Rows of w per N block: the L2 budget `w_bytes`, cut down so that every thread gets a
// few blocks, a multiple of the tile's nr. Only speed depends on it.
int64_t n_block(int64_t k, int64_t n, int threads, int64_t nr, int64_t w_bytes = kWBlockBytes) {
  int64_t nb = std::clamp<int64_t>(w_bytes / (4 * std::max<int64_t>(k, 1)), nr, kMaxNb);
  const int64_t per_thread = (n + 4 * threads - 1) / (4 * threads);
  nb = std::min(nb, std::max<int64_t>(per_thread, nr));
  return (nb + nr - 1) / nr * nr;
}

// Below this many multiply-adds a parallel region costs more than it saves.
bool worth_threads(const Dims& d, int64_t blocks) {
  return blocks > 1 && d.m * d.n * d.k >= (int64_t{1} << 16);
}

// ---- portable path ---------------------------------------------------------------

float dot_portable(const float* x, const float* w, int64_t k) {
  float acc[kLanes] = {};
  int64_t p = 0;
  for (; p + kLanes <= k; p += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] = std::fmaf(x[p + j], w[p + j], acc[j]);
  for (int j = 0; p + j < k; ++j) acc[j] = std::fmaf(x[p + j], w[p + j], acc[j]);
  return reduce_lanes(acc);
}

void run_portable(const float* x, const float* w, float* y, const Dims& d) {
  const int64_t nb = n_block(d.k, d.n, omp_get_max_threads(), kNr);
  const int64_t blocks = (d.n + nb - 1) / nb;
#pragma omp parallel for schedule(dynamic, 1) if (worth_threads(d, blocks))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n1 = std::min(d.n, (b + 1) * nb);
    for (int64_t m = 0; m < d.m; ++m)
      for (int64_t n = b * nb; n < n1; ++n)
        y[m * d.ldy + n] = dot_portable(x + m * d.ldx, w + n * d.ldw, d.k);
  }
}

// ---- AVX2 + FMA path -------------------------------------------------------------

#define OLMO2_AVX2 __attribute__((target("avx2,fma")))

// _mm256_loadu_si256(kMaskSource + 8 - c) enables the first c lanes.
alignas(64) constexpr int32_t kMaskSource[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                 0,  0,  0,  0,  0,  0,  0,  0};


// One MR × NR tile over K positions [k0, k0 + len) (k0 a multiple of 16): x and w point
// at x[m0, k0] and w[n0, k0]. `acc` holds the tile's lanes between K blocks, element
// (i, j) at acc + i * acc_ld + j * 16. The first block starts from zeros instead of
// reading acc; the last reduces into y[m0 + i, n0 + j] instead of writing acc.
template <int MR, int NR>
OLMO2_AVX2 void tile_avx2(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t len,
                          float* acc, int64_t acc_ld, bool first, bool last, float* y,
                          int64_t ldy) {
  __m256 a[MR][NR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j)
#pragma GCC unroll 2
      for (int c = 0; c < 2; ++c)
        a[i][j][c] =
            first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + i * acc_ld + j * kLanes + 8 * c);
  int64_t p = 0;
  for (; p + kLanes <= len; p += kLanes) {
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      __m256 wv[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) wv[j] = _mm256_loadu_ps(w + j * ldw + p + 8 * c);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        __m256 xv = _mm256_loadu_ps(x + i * ldx + p + 8 * c);
        // Keep xv in a register: folded into each fma it would be loaded NR times.
        __asm__("" : "+x"(xv));
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) a[i][j][c] = _mm256_fmadd_ps(xv, wv[j], a[i][j][c]);
      }
    }
  }
  if (p < len) {
    // The K % 16 tail: lanes below the remainder take one more fma, the others keep
    // their value exactly (a blend, not an fma with zeros, which would turn -0 into +0).
    const int64_t rem = len - p;
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const int64_t count = std::clamp<int64_t>(rem - 8 * c, 0, 8);
      if (count == 0) continue;
      const __m256i mask =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskSource + 8 - count));
      const __m256 maskf = _mm256_castsi256_ps(mask);
      __m256 wv[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) wv[j] = _mm256_maskload_ps(w + j * ldw + p + 8 * c, mask);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m256 xv = _mm256_maskload_ps(x + i * ldx + p + 8 * c, mask);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j)
          a[i][j][c] = _mm256_blendv_ps(a[i][j][c], _mm256_fmadd_ps(xv, wv[j], a[i][j][c]), maskf);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      if (last) {
        y[i * ldy + j] = detail::reduce_lanes16(a[i][j][0], a[i][j][1]);
      } else {
        _mm256_storeu_ps(acc + i * acc_ld + j * kLanes, a[i][j][0]);
        _mm256_storeu_ps(acc + i * acc_ld + j * kLanes + 8, a[i][j][1]);
      }
    }
}

// kTiles[mr - 1][nr - 1]: the full tile and every smaller one for the M and N edges.
// They differ only in how many elements run side by side, never in an element's steps.
template <int MR, int... NRs>
constexpr std::array<detail::BatchInvariantTileFn, sizeof...(NRs)> tile_row(
    std::integer_sequence<int, NRs...>) {
  return {&tile_avx2<MR, NRs + 1>...};
}
template <int... MRs>
constexpr std::array<std::array<detail::BatchInvariantTileFn, kNr>, sizeof...(MRs)> tile_table(
    std::integer_sequence<int, MRs...>) {
  return {tile_row<MRs + 1>(std::make_integer_sequence<int, kNr>())...};
}
constexpr auto kTiles = tile_table(std::make_integer_sequence<int, kMr>());

detail::BatchInvariantTileFn pick_avx2(int mr, int nr) { return kTiles[mr - 1][nr - 1]; }
const detail::BatchInvariantKernel kAvx2Kernel{kMr, kNr, &pick_avx2, kWBlockBytes};

// ---- the driver of the vector paths ------------------------------------------------

// Columns [n0, n1) of y for every row, on one thread, with kernel `kern`'s tiles;
// `acc` has room for max_mr × (n1 - n0) elements of 16 lanes.
void block_tiles(const detail::BatchInvariantKernel& kern, const float* x, const float* w,
                 float* y, const Dims& d, int64_t n0, int64_t n1, float* acc) {
  const int64_t acc_ld = (n1 - n0) * kLanes;
  const int64_t k_blocks = std::max<int64_t>(1, (d.k + kKc - 1) / kKc);
  for (int64_t m0 = 0; m0 < d.m; m0 += kern.max_mr) {
    const int mr = static_cast<int>(std::min<int64_t>(kern.max_mr, d.m - m0));
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const int64_t k0 = kb * kKc, len = std::min(kKc, d.k - k0);
      for (int64_t n = n0; n < n1; n += kern.max_nr) {
        const int nr = static_cast<int>(std::min<int64_t>(kern.max_nr, n1 - n));
        kern.tile(mr, nr)(x + m0 * d.ldx + k0, d.ldx, w + n * d.ldw + k0, d.ldw, len,
                          acc + (n - n0) * kLanes, acc_ld, kb == 0, kb == k_blocks - 1,
                          y + m0 * d.ldy + n, d.ldy);
      }
    }
  }
}

// Threads over blocks of N only: an element's operations never depend on the split.
void run_tiles(const detail::BatchInvariantKernel& kern, const float* x, const float* w, float* y,
               const Dims& d) {
  const int64_t nb = n_block(d.k, d.n, omp_get_max_threads(), kern.max_nr, kern.w_block_bytes);
  const int64_t blocks = (d.n + nb - 1) / nb;
#pragma omp parallel if (worth_threads(d, blocks))
  {
    std::vector<float> acc(static_cast<size_t>(kern.max_mr * nb * kLanes));
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < blocks; ++b)
      block_tiles(kern, x, w, y, d, b * nb, std::min(d.n, (b + 1) * nb), acc.data());
  }
}

// ---- path choice -------------------------------------------------------------------

constexpr std::array<BatchInvariantPath, 3> kPaths = {
    BatchInvariantPath::Avx512, BatchInvariantPath::Avx2, BatchInvariantPath::Portable};

detail::CodePathChoice<BatchInvariantPath, 3>& choice() {
  static detail::CodePathChoice<BatchInvariantPath, 3> c(
      "OLMO2_BATCH_INVARIANT_GEMM", kPaths, &batch_invariant_path_name, &batch_invariant_path_available);
  return c;
}

void run_path(BatchInvariantPath path, const float* x, const float* w, float* y, const Dims& d) {
  switch (path) {
    case BatchInvariantPath::Avx512:
      return run_tiles(detail::batch_invariant_kernel_avx512(), x, w, y, d);
    case BatchInvariantPath::Avx2:
      return run_tiles(kAvx2Kernel, x, w, y, d);
    case BatchInvariantPath::Portable:
      break;
  }
  run_portable(x, w, y, d);
}

}  // namespace

namespace detail {

bool batch_invariant_has_avx2_fma() { return cpu_has_avx2_fma(); }

bool batch_invariant_has_avx512() { return cpu_has_avx512(); }

BatchInvariantPath choose_batch_invariant_path(const char* env,
                                               bool (*available)(BatchInvariantPath)) {
  return choose_code_path("OLMO2_BATCH_INVARIANT_GEMM", env, kPaths, &batch_invariant_path_name,
                          available);
}

void linear_batch_invariant(const TensorView& x, const TensorView& w, const TensorView& y,
                            BatchInvariantPath path) {
  const Dims d = check_shapes(x, w, y);
  OLMO2_CHECK(batch_invariant_path_available(path), "linear_batch_invariant: this CPU lacks the ",
              batch_invariant_path_name(path), " path");
  OLMO2_CHECK(x.dtype() == DType::F32 && w.dtype() == DType::F32 && y.dtype() == DType::F32,
              "linear_batch_invariant on the ", batch_invariant_path_name(path),
              " path wants f32 views");
  if (d.m == 0 || d.n == 0) return;
  run_path(path, x.f32(), w.f32(), y.f32(), d);
}

void linear_batch_invariant_portable(const TensorView& x, const TensorView& w,
                                     const TensorView& y) {
  linear_batch_invariant(x, w, y, BatchInvariantPath::Portable);
}

void linear_batch_invariant_avx2(const TensorView& x, const TensorView& w, const TensorView& y) {
  linear_batch_invariant(x, w, y, BatchInvariantPath::Avx2);
}

void linear_batch_invariant_avx512(const TensorView& x, const TensorView& w, const TensorView& y) {
  linear_batch_invariant(x, w, y, BatchInvariantPath::Avx512);
}

}  // namespace detail

const char* batch_invariant_path_name(BatchInvariantPath path) {
  switch (path) {
    case BatchInvariantPath::Avx512:
      return "avx512";
    case BatchInvariantPath::Avx2:
      return "avx2";
    case BatchInvariantPath::Portable:
      return "portable";
  }
  return "?";
}

bool batch_invariant_path_available(BatchInvariantPath path) {
  switch (path) {
    case BatchInvariantPath::Avx512:
      return detail::batch_invariant_has_avx512();
    case BatchInvariantPath::Avx2:
      return detail::batch_invariant_has_avx2_fma();
    case BatchInvariantPath::Portable:
      return true;
  }
  return false;
}

BatchInvariantPath batch_invariant_path() { return choice().current(); }

const char* batch_invariant_path_name() { return batch_invariant_path_name(batch_invariant_path()); }

void set_batch_invariant_path(BatchInvariantPath path) { choice().force(path, "set_batch_invariant_path"); }

void reset_batch_invariant_path() { choice().reset(); }

void cpu::linear_batch_invariant(const TensorView& x, const TensorView& w, const TensorView& y) {
  if (w.dtype() == DType::BF16) return detail::linear_bf16(x, w, y);  // batch-invariant by construction
  const Dims d = check_shapes(x, w, y);
  const BatchInvariantPath path = batch_invariant_path();  // InputError for a bad override
  if (d.m == 0 || d.n == 0) return;
  run_path(path, x.f32(), w.f32(), y.f32(), d);
}

}  // namespace olmo2::ops
