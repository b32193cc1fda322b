// What CUDA device code needs to compile as host C++ and run on the SIMT executor
// (ops/simt/executor.h; docs/architecture.md §10): the execution-space keywords, the
// built-in index variables, __syncthreads and the warp intrinsics, atomics, the
// correctly rounded arithmetic intrinsics, and bf16. Only in the OLMO2_CUDA_ON_CPU build,
// through the stand-in headers of ops/simt/include/. Semantics: CUDA C++ Programming
// Guide (built-in variables, synchronisation, warp functions, atomics, intrinsic
// functions) and the CUDA Math API (bf16 conversions).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>

#include "ops/simt/bf16_bits.h"
#include "ops/simt/executor.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
// One OS thread runs one block (a fresh thread per block), so a thread_local is exactly
// one block's shared memory, zeroed at the block's start.
#define __shared__ static thread_local
#define __restrict__ __restrict

#define threadIdx (::olmo2::simt::thread_idx())
#define blockIdx (::olmo2::simt::block_idx())
#define blockDim (::olmo2::simt::block_dim())
#define gridDim (::olmo2::simt::grid_dim())
inline constexpr int warpSize = 32;

using dim3 = ::olmo2::simt::Dim3;
using uint3 = ::olmo2::simt::Dim3;

inline void __syncthreads(std::source_location at = std::source_location::current()) {
  ::olmo2::simt::syncthreads(::olmo2::simt::site_name(at));
}

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32, std::source_location at = std::source_location::current()) {
  return ::olmo2::simt::shuffle(::olmo2::simt::WarpOp::ShflIdx, mask, v, src, width, ::olmo2::simt::site_name(at));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                  std::source_location at = std::source_location::current()) {
  return ::olmo2::simt::shuffle(::olmo2::simt::WarpOp::ShflXor, mask, v, lane_mask, width, ::olmo2::simt::site_name(at));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,
                   std::source_location at = std::source_location::current()) {
  return ::olmo2::simt::shuffle(::olmo2::simt::WarpOp::ShflDown, mask, v, static_cast<int>(delta), width,
                                ::olmo2::simt::site_name(at));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                 std::source_location at = std::source_location::current()) {
  return ::olmo2::simt::shuffle(::olmo2::simt::WarpOp::ShflUp, mask, v, static_cast<int>(delta), width,
                                ::olmo2::simt::site_name(at));
}
inline unsigned __ballot_sync(unsigned mask, int predicate, std::source_location at = std::source_location::current()) {
  return static_cast<unsigned>(::olmo2::simt::warp_exchange(::olmo2::simt::WarpOp::Ballot, mask, predicate != 0, 0, 32,
                                                            ::olmo2::simt::site_name(at)));
}
template <typename T>
unsigned __match_any_sync(unsigned mask, T value, std::source_location at = std::source_location::current()) {
  static_assert(sizeof(T) <= 8 && std::is_integral_v<T>, "__match_any_sync takes a 32- or 64-bit integer");
  return static_cast<unsigned>(::olmo2::simt::warp_exchange(::olmo2::simt::WarpOp::MatchAny, mask,
                                                            static_cast<uint64_t>(value), 0, 32,
                                                            ::olmo2::simt::site_name(at)));
}

// --- Integer and bit intrinsics ----------------------------------------------------------
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1; }
inline int __clz(int x) { return std::countl_zero(static_cast<unsigned>(x)); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }

// The device min/max overloads (integer and float) that CUDA puts in the global namespace.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }

// --- Correctly rounded f32 arithmetic (round to nearest even, never contracted) ----------
// The sources built in this mode are compiled with -ffp-contract=off, so each of these is
// one IEEE operation, as on the GPU.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }

// --- Atomics (relaxed read-modify-write on global or shared memory; return the old value)
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline float atomicAdd(float* p, float v) {
  unsigned* bits = reinterpret_cast<unsigned*>(p);
  unsigned old = __atomic_load_n(bits, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(bits, &old, std::bit_cast<unsigned>(std::bit_cast<float>(old) + v), true,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return std::bit_cast<float>(old);
}
inline int atomicMax(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

// --- bf16 (cuda_bf16.h) -------------------------------------------------------------------
/// The bf16 storage type: 16 bits, no arithmetic (the kernels convert to f32).
struct __nv_bfloat16 {
  uint16_t bits;
};
/// f32 → bf16, round to nearest even; every NaN becomes the canonical 0x7fff, as the CUDA
/// Math API's __float2bfloat16_rn.
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {::olmo2::simt::bf16_round_bits(f)}; }
inline float __bfloat162float(__nv_bfloat16 b) { return ::olmo2::simt::bf16_widen_bits(b.bits); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { return {s}; }
