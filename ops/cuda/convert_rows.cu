// Row-wise f32 ↔ bf16 conversions for the CUDA products (ops/cuda/convert_rows.h).
#include <cuda_bf16.h>

#include <algorithm>

#include "ops/cuda/check.h"
#include "ops/cuda/convert_rows.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/runtime.h"

namespace olmo2::ops::cuda::detail {
namespace {

constexpr int kThreads = 256;

// One grid-stride loop over the rows·cols elements; int64 offsets throughout.
template <typename In, typename Out, typename F>
__global__ void convert_kernel(const In* in, int64_t ld_in, int64_t rows, int64_t cols, Out* out, int64_t ld_out,
                               F f) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    out[r * ld_out + c] = f(in[r * ld_in + c]);
  }
}

struct ToBf16 {
  __device__ __nv_bfloat16 operator()(float v) const { return __float2bfloat16_rn(v); }
};
struct ToF32 {
  __device__ float operator()(__nv_bfloat16 v) const { return __bfloat162float(v); }
};

unsigned blocks_for(int64_t total) {
  return static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
}

}  // namespace

void round_rows_to_bf16(const float* x, int64_t ldx, int64_t rows, int64_t cols, void* out, int64_t ld_out) {
  if (rows <= 0 || cols <= 0) return;
  OLMO2_LAUNCH(blocks_for(rows * cols), kThreads, 0, compute_stream(), convert_kernel<float, __nv_bfloat16, ToBf16>)(
      x, ldx, rows, cols, static_cast<__nv_bfloat16*>(out), ld_out, ToBf16{});
  OLMO2_CUDA_CHECK_LAUNCH("round_rows_to_bf16");
}

void widen_rows_to_f32(const void* w, int64_t ldw, int64_t rows, int64_t cols, float* out, int64_t ld_out) {
  if (rows <= 0 || cols <= 0) return;
  OLMO2_LAUNCH(blocks_for(rows * cols), kThreads, 0, compute_stream(), convert_kernel<__nv_bfloat16, float, ToF32>)(
      static_cast<const __nv_bfloat16*>(w), ldw, rows, cols, out, ld_out, ToF32{});
  OLMO2_CUDA_CHECK_LAUNCH("widen_rows_to_f32");
}

}  // namespace olmo2::ops::cuda::detail
