// The bf16-weight product y = bf16(x)·wᵀ: checks, x rounded and packed, and the driver
// that runs a path's register tiles over blocks of w on OpenMP threads. Nothing here
// decides an element's operations — each element is one fixed sequence of lane fmas
// and one reduction (docs/architecture.md §2), whatever M, N, the block split or the
// thread count — so the product is batch-invariant on every path.
#include <omp.h>
#include <xmmintrin.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/cpu/bf16_gemm_detail.h"

namespace olmo2::ops::detail {
namespace {

// K is walked in blocks of whole 32-element groups, the lanes parked in a per-thread
// buffer between blocks, so that an x tile (max_mr rows) of up to kXTileBytes stays in
// L1, and each w row streams in runs of several KiB; at least kMinKc per block. The
// block depends on the path's tile alone, never on M (a lane's fmas are the same
// sequence in any case: the lanes are carried exactly between blocks).
constexpr int64_t kXTileBytes = 32 * 1024;
constexpr int64_t kMinKc = 1024;
static_assert(kMinKc % kBf16Group == 0);
// The w rows of one N block should stay in a core's L2 while the x tiles pass over them.
constexpr int64_t kWBlockBytes = 256 * 1024;
constexpr int64_t kMaxNb = 256;

struct Dims {
  int64_t m, k, n;
};

Dims check_shapes(const TensorView& x, const TensorView& w, const TensorView& y) {
  OLMO2_CHECK(x.dim() == 2 && w.dim() == 2 && y.dim() == 2,
              "linear (bf16 w) wants 2-d views, got x ", x.shape_str(), " w ", w.shape_str(), " y ",
              y.shape_str());
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  OLMO2_CHECK(w.size(1) == k && y.size(0) == m && y.size(1) == n, "linear (bf16 w): x ",
              x.shape_str(), " · w ", w.shape_str(), "ᵀ -> y ", y.shape_str());
  OLMO2_CHECK(x.dtype() == DType::F32 && w.dtype() == DType::BF16 && y.dtype() == DType::F32,
              "linear with a bf16 w wants f32 x and y, got x ", dtype_name(x.dtype()), " y ",
              dtype_name(y.dtype()));
  OLMO2_CHECK(x.stride(1) == 1 && w.stride(1) == 1 && y.stride(1) == 1,
              "linear (bf16 w) needs a contiguous last dimension");
  return {m, k, n};
}

// MXCSR with DAZ (bit 6) and FTZ (bit 15) set for this thread while it lives.
class DazFtz {
 public:
  explicit DazFtz(bool on) : on_(on), saved_(on ? _mm_getcsr() : 0) {
    if (on_) _mm_setcsr(saved_ | 0x8040u);
  }
  ~DazFtz() {
    if (on_) _mm_setcsr(saved_);
  }
  DazFtz(const DazFtz&) = delete;
  DazFtz& operator=(const DazFtz&) = delete;

 private:
  bool on_;
  unsigned saved_;
};

// x rounded to bf16 (nearest even), subnormals read as zero, K padded with +0 to a
// whole number of groups.
std::vector<uint16_t> pack_x(const TensorView& x, int64_t kp) {
  const int64_t m = x.size(0), k = x.size(1);
  std::vector<uint16_t> xb(static_cast<size_t>(m * kp), 0);
  const float* src = x.f32();
#pragma omp parallel for schedule(static) if (m * k > (1 << 16))
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      xb[static_cast<size_t>(i * kp + p)] = bf16_daz(f32_to_bf16(src[i * x.stride(0) + p]));
  return xb;
}

// Rows of w per N block: the L2 budget, cut down so that every thread gets a few blocks.
// Only speed depends on it.
int64_t n_block(int64_t k, int64_t n, int threads, int nr) {
  int64_t nb = std::clamp<int64_t>(kWBlockBytes / (2 * std::max<int64_t>(k, 1)), nr, kMaxNb);
  const int64_t per_thread = (n + 4 * threads - 1) / (4 * threads);
  nb = std::min(nb, std::max<int64_t>(per_thread, nr));
  return (nb + nr - 1) / nr * nr;
}

struct Problem {
  const uint16_t* x;
  int64_t ldx;
  const uint16_t* w;
  int64_t ldw;
  float* y;
  int64_t ldy;
  Dims d;
  int64_t kc;  // K per block, a multiple of kBf16Group
};

// K per block for x tiles of up to max_mr rows.
int64_t k_block(int max_mr) {
  return std::max(kMinKc, kXTileBytes / (2 * max_mr) / kBf16Group * kBf16Group);
}

// Columns [n0, n1) of y for every row, on one thread; `acc` has room for
// max_mr × (n1 − n0) elements of 16 lanes.
void run_block(const Bf16Kernel& kern, const Problem& p, int64_t n0, int64_t n1, float* acc) {
  const int64_t acc_ld = (n1 - n0) * 16;
  const int64_t full = p.d.k / kBf16Group * kBf16Group;  // K positions in whole groups of w
  const int64_t kp = (p.d.k + kBf16Group - 1) / kBf16Group * kBf16Group;
  const int64_t k_blocks = std::max<int64_t>(1, (kp + p.kc - 1) / p.kc);
  // The last, partial group of w rows, zero-padded (x is padded already).
  std::vector<uint16_t> w_tail(static_cast<size_t>(kern.max_nr * kBf16Group));
  for (int64_t m0 = 0; m0 < p.d.m; m0 += kern.max_mr) {
    const int mr = static_cast<int>(std::min<int64_t>(kern.max_mr, p.d.m - m0));
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const int64_t k0 = kb * p.kc, k1 = std::min(kp, k0 + p.kc);
      const int64_t whole = std::max<int64_t>(0, std::min(k1, full) - k0) / kBf16Group;
      const bool tail = k1 > full && kp > full;
      const bool last_block = kb == k_blocks - 1;
      for (int64_t n = n0; n < n1; n += kern.max_nr) {
        const int nr = static_cast<int>(std::min<int64_t>(kern.max_nr, n1 - n));
        const Bf16TileFn tile = kern.tile(mr, nr);
        const uint16_t* xt = p.x + m0 * p.ldx + k0;
        float* at = acc + (n - n0) * 16;
        float* yt = p.y + m0 * p.ldy + n;
        const bool first = kb == 0;
        if (whole > 0 || !tail)
          tile(xt, p.ldx, p.w + n * p.ldw + k0, p.ldw, whole, at, acc_ld, first,
               last_block && !tail, yt, p.ldy);
        if (tail) {
          std::fill(w_tail.begin(), w_tail.end(), uint16_t{0});
          for (int j = 0; j < nr; ++j)
            std::copy(p.w + (n + j) * p.ldw + full, p.w + (n + j) * p.ldw + p.d.k,
                      w_tail.data() + j * kBf16Group);
          tile(xt + whole * kBf16Group, p.ldx, w_tail.data(), kBf16Group, 1, at, acc_ld,
               first && whole == 0, last_block, yt, p.ldy);
        }
      }
    }
  }
}

void run(const Bf16Kernel& kern, const Problem& p) {
  const int64_t nb = n_block(p.d.k, p.d.n, omp_get_max_threads(), kern.max_nr);
  const int64_t blocks = (p.d.n + nb - 1) / nb;
  const bool threads = blocks > 1 && p.d.m * p.d.n * p.d.k >= (int64_t{1} << 16);
#pragma omp parallel if (threads)
  {
    const DazFtz mode(kern.daz_ftz);
    std::vector<float> acc(static_cast<size_t>(kern.max_mr * nb * 16));
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < blocks; ++b)
      run_block(kern, p, b * nb, std::min(p.d.n, (b + 1) * nb), acc.data());
  }
}

}  // namespace

void linear_bf16(const TensorView& x, const TensorView& w, const TensorView& y) {
  linear_bf16(x, w, y, bf16_gemm_path());
}

void linear_bf16_training(const TensorView& x, const TensorView& w, const TensorView& y) {
  const Bf16GemmPath path = bf16_training_gemm_path();
  if (path != Bf16GemmPath::OneDnn) return linear_bf16(x, w, y, path);
  check_shapes(x, w, y);
  OLMO2_CHECK(w.device() == Device::CPU, "linear (bf16 w): w is not on the CPU");
  linear_onednn(x, w, y);
}

void linear_bf16(const TensorView& x, const TensorView& w, const TensorView& y, Bf16GemmPath path) {
  const Dims d = check_shapes(x, w, y);
  const Bf16Kernel& kernel = bf16_kernel(path);
  if (d.m == 0 || d.n == 0) return;
  OLMO2_CHECK(w.device() == Device::CPU, "linear (bf16 w): w is not on the CPU");
  const int64_t kp = (d.k + kBf16Group - 1) / kBf16Group * kBf16Group;
  const std::vector<uint16_t> xb = pack_x(x, kp);
  const auto* wb = static_cast<const uint16_t*>(w.data());
  const Problem p{xb.data(), kp, wb, w.stride(0), y.f32(), y.stride(0), d, k_block(kernel.max_mr)};
  run(kernel, p);
}

}  // namespace olmo2::ops::detail
