// Block-wide reductions and the bit-exact dtype conversions shared by the CUDA glue and
// loss kernels (ops/cuda/*.cu; docs/architecture.md §2). Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace olmo2::ops::cuda::detail {

/// f32 → bf16 bits, round to nearest even, NaN kept NaN with its quiet bit set: the same
/// bits as the CPU's f32_to_bf16 (ops/dtype.h, its host twin; change both together), not
/// __float2bfloat16_rn's canonical NaN.
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// bf16 bits → f32 (exact).
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

/// IEEE half bits → f32, exact: the device twin of f16_to_f32 (ops/dtype.cpp), the same
/// bit arithmetic (NaN payloads kept, subnormals normalised); change both together.
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: shift the leading one into the implicit bit
    exp = 113;
    while ((mant & 0x400u) == 0) mant <<= 1, --exp;
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  return __uint_as_float(bits);
}

/// Rounds an f32 value to the nearest bf16 value (as the CPU's round_bf16).
__device__ __forceinline__ float round_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// Reduces `v` over the whole block (blockDim.x a multiple of 32, at most 1024) with
/// `op`, in a fixed tree (so the result depends only on the block size); every thread
/// gets the result. `identity` fills the missing warps. Uses 32 T of shared memory and
/// two __syncthreads; safe to call repeatedly.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();  // a previous call's readers are done with `partial`
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? partial[threadIdx.x & 31] : identity;
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

}  // namespace olmo2::ops::cuda::detail
