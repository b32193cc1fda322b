// Internal pieces of the bf16-weight products (ops/cpu/bf16_gemm*.cpp): the register
// tiles each code path provides, the driver that blocks and threads them, and entry
// points that force a path, for the tests. The operation sequence every path follows
// is the one documented at ops::linear_batch_invariant (docs/architecture.md §2);
// ops/bf16_gemm.h chooses the path.
#pragma once

#include <cstdint>

#include "ops/bf16_gemm.h"
#include "ops/tensor.h"

namespace olmo2::ops::detail {

/// Elements of K per group: 16 fp32 lanes × one pair of bf16 each.
inline constexpr int64_t kBf16Group = 32;

/// One register tile of MR rows of x × NR rows of w over `groups` groups of 32 K
/// positions: x and w point at the tile's first element of the first group (row
/// strides ldx, ldw, in bf16 elements). `acc` keeps the tile's 16 lanes between calls,
/// element (i, j) at acc + i·acc_ld + j·16; `first` starts them at +0 instead of
/// reading acc, `last` reduces them into y[i·ldy + j] instead of writing acc.
using Bf16TileFn = void (*)(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                            int64_t groups, float* acc, int64_t acc_ld, bool first, bool last,
                            float* y, int64_t ldy);

/// A code path's tiles: `tile(mr, nr)` for 1 ≤ mr ≤ max_mr, 1 ≤ nr ≤ max_nr (the edge
/// tiles differ only in how many elements run side by side, never in an element's
/// operations). `daz_ftz`: run the tiles with MXCSR's DAZ and FTZ bits set.
struct Bf16Kernel {
  int max_mr, max_nr;
  Bf16TileFn (*tile)(int mr, int nr);
  bool daz_ftz;
};

/// The kernel of each path (ops/cpu/bf16_gemm_{portable,avx2,avx512}.cpp). The vector
/// ones must only run where bf16_gemm_path_available says so.
const Bf16Kernel& bf16_kernel_portable();
const Bf16Kernel& bf16_kernel_avx2();
const Bf16Kernel& bf16_kernel_avx512bf16();
/// The kernel of `path`; ShapeError when this CPU lacks it.
const Bf16Kernel& bf16_kernel(Bf16GemmPath path);

/// The path OLMO2_BF16_GEMM = `env` selects on a CPU that has the paths `available`
/// says (bf16_gemm_path's rule; tests pass other CPUs): with `env` null or empty the
/// fastest available one, else the one it names. InputError naming the value when it
/// names no path or one the CPU lacks.
Bf16GemmPath choose_bf16_gemm_path(const char* env, bool (*available)(Bf16GemmPath));

/// y = bf16(x)·wᵀ on bf16_gemm_path(), or on `path`: x [M, K] f32, w [N, K] bf16,
/// y [M, N] f32, last dimensions contiguous. The checks of ops::linear_batch_invariant;
/// ShapeError when this CPU lacks `path`.
void linear_bf16(const TensorView& x, const TensorView& w, const TensorView& y);
void linear_bf16(const TensorView& x, const TensorView& w, const TensorView& y, Bf16GemmPath path);

/// dx [M, K] (=, or += when accumulate) dy [M, N] · w [N, K] with a bf16 w: w widened to
/// f32 in panels, each an OpenBLAS sgemm (fp32 accumulation; dy is not rounded).
/// Views: f32 dy, dx and bf16 w on the CPU, contiguous last dimension, shapes checked
/// by the caller.
void linear_dx_bf16(const TensorView& dy, const TensorView& w, const TensorView& dx,
                    bool accumulate);

/// The onednn path (ops/cpu/bf16_onednn.cpp): one oneDNN bf16 matmul each, bf16 inputs
/// (f32 operands rounded to nearest even), f32 accumulation and output; not
/// batch-invariant. Views on the CPU, contiguous last dimension, shapes checked by the
/// caller; dnnl::error on a oneDNN failure.
///   linear_onednn:    y [M, N] = bf16(x [M, K]) · w [N, K]ᵀ
///   linear_dx_onednn: dx [M, K] (=, or += when accumulate) bf16(dy [M, N]) · w [N, K]
///   linear_dw_onednn: dw [N, K] (=, or += when accumulate) bf16(dy [M, N])ᵀ · bf16(x [M, K])
void linear_onednn(const TensorView& x, const TensorView& w, const TensorView& y);
void linear_dx_onednn(const TensorView& dy, const TensorView& w, const TensorView& dx, bool accumulate);
void linear_dw_onednn(const TensorView& x, const TensorView& dy, const TensorView& dw, bool accumulate);

/// Whether oneDNN can make a bf16 matmul on this CPU (probed once: oneDNN 2.6 needs
/// avx512_core or newer; ONEDNN_MAX_CPU_ISA may lower it).
bool onednn_bf16_matmul_available();

/// y = bf16(x)·wᵀ for ops::linear with a bf16 w: on bf16_training_gemm_path() (onednn, or
/// the batch-invariant product's path). The checks of linear_bf16.
void linear_bf16_training(const TensorView& x, const TensorView& w, const TensorView& y);

/// bf16 bits with a subnormal read as a zero of its sign (DAZ).
inline uint16_t bf16_daz(uint16_t b) {
  return (b & 0x7f80u) == 0 ? static_cast<uint16_t>(b & 0x8000u) : b;
}

}  // namespace olmo2::ops::detail
