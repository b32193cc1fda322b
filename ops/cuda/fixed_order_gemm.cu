// The fixed-order product (ops/cuda/fixed_order_gemm.h): 64×64 output tiles per block of
// 256 threads, x and w staged through shared memory 32 columns of K at a time; each
// thread owns 4×4 outputs and adds their products in increasing k with fmaf. Slower than
// cuBLASLt (no tensor cores) and only used where cuBLASLt cannot give one order for all
// batch sizes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/check.h"
#include "ops/cuda/fixed_order_gemm.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/runtime.h"

namespace olmo2::ops::cuda::detail {
namespace {

constexpr int kTile = 64, kDepth = 32, kThreads = 256;

__device__ __forceinline__ float load(const void* p, bool bf16, int64_t i) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
}

__global__ void __launch_bounds__(kThreads) fixed_order_kernel(const void* x, bool x_bf16, int64_t ldx, const void* w,
                                                               bool w_bf16, int64_t ldw, float* y, int64_t ldy,
                                                               int64_t rows_x, int64_t rows_w, int64_t k) {
  __shared__ float xs[kDepth][kTile + 1];  // [k][m]
  __shared__ float ws[kDepth][kTile + 1];  // [k][n]
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile, n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tm = threadIdx.x / 16 * 4, tn = threadIdx.x % 16 * 4;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
    for (int i = threadIdx.x; i < kTile * kDepth; i += kThreads) {
      const int r = i / kDepth, c = i % kDepth;
      const int64_t kk = k0 + c;
      xs[c][r] = (m0 + r < rows_x && kk < k) ? load(x, x_bf16, (m0 + r) * ldx + kk) : 0.0f;
      ws[c][r] = (n0 + r < rows_w && kk < k) ? load(w, w_bf16, (n0 + r) * ldw + kk) : 0.0f;
    }
    __syncthreads();
    const int depth = k - k0 < kDepth ? static_cast<int>(k - k0) : kDepth;
    for (int c = 0; c < depth; ++c) {  // k in increasing order; past K nothing is added
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xs[c][tm + i], ws[c][tn + j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t m = m0 + tm + i, n = n0 + tn + j;
      if (m < rows_x && n < rows_w) y[m * ldy + n] = acc[i][j];
    }
}

}  // namespace

void fixed_order_product(const void* x, bool x_bf16, int64_t ldx, const void* w, bool w_bf16, int64_t ldw, float* y,
                         int64_t ldy, int64_t rows_x, int64_t rows_w, int64_t k) {
  if (rows_x == 0 || rows_w == 0) return;
  const dim3 grid(static_cast<unsigned>((rows_w + kTile - 1) / kTile), static_cast<unsigned>((rows_x + kTile - 1) / kTile));
  OLMO2_LAUNCH(grid, kThreads, 0, compute_stream(), fixed_order_kernel)(x, x_bf16, ldx, w, w_bf16, ldw, y, ldy, rows_x, rows_w, k);
  OLMO2_CUDA_CHECK(cudaGetLastError());
}

}  // namespace olmo2::ops::cuda::detail
