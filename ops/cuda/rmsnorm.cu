// CUDA RMSNorm: one block per row, fp32 statistics, weight multiplied before the cast.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/runtime.h"
#include "ops/rmsnorm.h"

namespace olmo2::ops {
namespace {

__device__ inline float to_f32(float v) { return v; }
__device__ inline float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ inline T from_f32(float v);
template <>
__device__ inline float from_f32<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T, typename W>
__global__ void rmsnorm_kernel(const T* x, int64_t x_stride, const W* w, float eps, T* y,
                               int64_t y_stride, int64_t d) {
  const T* xr = x + blockIdx.x * x_stride;
  T* yr = y + blockIdx.x * y_stride;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = to_f32(xr[i]);
    ss += v * v;
  }
  __shared__ float partial[32];
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    ss = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (threadIdx.x == 0) partial[0] = ss;
  }
  __syncthreads();
  // 1/sqrt correctly rounded, as the CPU and rmsnorm_apply (rsqrtf is up to 2 ulp off).
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(partial[0], static_cast<float>(d)), eps)));
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    yr[i] = from_f32<T>(to_f32(w[i]) * (to_f32(xr[i]) * inv));
  }
}

template <typename T, typename W>
void launch(const TensorView& x, const TensorView& w, float eps, const TensorView& y,
            int64_t rows, int64_t d) {
  if (rows == 0) return;
  OLMO2_LAUNCH(static_cast<unsigned>(rows), 256, 0, cuda::compute_stream(), rmsnorm_kernel<T, W>)(
      static_cast<const T*>(x.data()), x.stride(0), static_cast<const W*>(w.data()), eps,
      static_cast<T*>(y.data()), y.stride(0), d);
  OLMO2_CUDA_CHECK_LAUNCH("rmsnorm_kernel");
}

}  // namespace

void cuda::rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& y) {
  const auto [rows, d] = rmsnorm_check(x, w, y);
  OLMO2_CHECK(x.device() == Device::CUDA, "cuda::rmsnorm on a non-CUDA view");
  const bool xf = x.dtype() == DType::F32, wf = w.dtype() == DType::F32;
  if (xf && wf) launch<float, float>(x, w, eps, y, rows, d);
  else if (xf) launch<float, __nv_bfloat16>(x, w, eps, y, rows, d);
  else if (wf) launch<__nv_bfloat16, float>(x, w, eps, y, rows, d);
  else launch<__nv_bfloat16, __nv_bfloat16>(x, w, eps, y, rows, d);
}

}  // namespace olmo2::ops
