// CUDA top_candidates (ops/top_candidates.h; docs/architecture.md §8): one block per
// row. Each real column gets a 64-bit key, order_key(value) above (2^32 − 1 − column),
// so that "more likely" (higher value, then lower column) is "larger key" and keys are
// unique. One candidate: a block max of the keys. k candidates: a radix select (four
// 8-bit passes over the value keys, most significant first) finds the k-th largest value
// T and how many columns equal to T are needed; a collecting pass takes every column
// above T and, in column order, the first needed ones equal to T; the k chosen are then
// ranked by key in shared memory. The choice equals the CPU's exactly; values are the
// logits' own bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/reduce.cuh"
#include "ops/cuda/runtime.h"
#include "ops/top_candidates.h"

namespace olmo2::ops {
namespace {

constexpr int kThreads = 512;  // a multiple of 32 (block_reduce, the warp ballots)
constexpr int kWarps = kThreads / 32;
constexpr int kMax = static_cast<int>(kMaxDeviceTopCandidates);

/// Order-preserving map of an f32 onto uint32 (a larger value has a larger key); −0 has
/// +0's key, as the two compare equal; every NaN has key 0, below −∞'s (0x007fffff), as the
/// CPU's order puts NaN below every number (a NaN's bits would otherwise rank it above +∞).
__device__ __forceinline__ uint32_t order_key(float v) {
  uint32_t b = __float_as_uint(v);
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0u;  // NaN
  if ((b & 0x7fffffffu) == 0) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/// The unique key of column j: larger is more likely.
__device__ __forceinline__ uint64_t full_key(float v, int64_t j) {
  return (static_cast<uint64_t>(order_key(v)) << 32) | (0xffffffffu - static_cast<uint32_t>(j));
}

struct MaxKey {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};

/// Row blockIdx.x. `take` (1 ≤ take ≤ min(max(k, 1), real)) candidates are chosen; the
/// first min(k, take) are written.
__global__ void top_candidates_kernel(const float* logits, int64_t stride, int64_t real, int k, int take,
                                      float* values, int32_t* columns, float* stats) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining, s_greater, s_ties;
  __shared__ int warp_ties[kWarps];
  __shared__ int chosen[kMax];
  __shared__ uint64_t keys[kMax];
  __shared__ float s_max;
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * stride;
  float* v = values ? values + static_cast<int64_t>(blockIdx.x) * k : nullptr;
  int32_t* c = columns ? columns + static_cast<int64_t>(blockIdx.x) * k : nullptr;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float ninf = __uint_as_float(0xff800000u);  // −∞
  for (int j = (real < k ? static_cast<int>(real) : k) + tid; j < k; j += blockDim.x) v[j] = ninf, c[j] = -1;
  if (real == 0) {  // the same for every thread of the block: no barrier is skipped by some
    if (stats && tid == 0) stats[2 * blockIdx.x] = ninf, stats[2 * blockIdx.x + 1] = 0.0f;
    return;
  }
  if (take == 1) {
    uint64_t best = 0;  // below every column's key (its low word 2^32 − 1 − j is > 0)
    for (int64_t j = tid; j < real; j += blockDim.x) {
      const uint64_t key = full_key(x[j], j);
      if (key > best) best = key;
    }
    best = cuda::detail::block_reduce(best, MaxKey{}, uint64_t{0});
    if (tid == 0) {
      const int32_t j = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best));
      s_max = x[j];
      if (k > 0) v[0] = x[j], c[0] = j;
    }
  } else {
    // Radix select of the take-th largest value key: prefix/mask fix its high bytes,
    // `remaining` counts the ones still to take among the columns matching the prefix.
    uint32_t prefix = 0, mask = 0;
    int remaining = take;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += blockDim.x) hist[b] = 0;
      __syncthreads();
      for (int64_t base = 0; base < real; base += blockDim.x) {  // the same trip count in every lane
        const int64_t j = base + tid;
        uint32_t bin = 256;  // none
        if (j < real) {
          const uint32_t u = order_key(x[j]);
          if ((u & mask) == prefix) bin = (u >> shift) & 0xffu;
        }
        // Logits crowd a few bins: one atomic per bin and warp.
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        if (bin < 256 && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], static_cast<uint32_t>(__popc(peers)));
      }
      __syncthreads();
      if (tid == 0) {
        int above = 0, b = 255;
        for (; b > 0; --b) {
          if (above + static_cast<int>(hist[b]) >= remaining) break;
          above += static_cast<int>(hist[b]);
        }
        s_prefix = prefix | (static_cast<uint32_t>(b) << shift);
        s_remaining = remaining - above;
      }
      __syncthreads();
      prefix = s_prefix, remaining = s_remaining;
      mask |= 0xffu << shift;
    }
    // Collect: all columns above T = prefix (take − remaining of them, any slot order),
    // then the first `remaining` columns equal to T in column order.
    const int greater = take - remaining;
    if (tid == 0) s_greater = 0, s_ties = 0;
    __syncthreads();
    for (int64_t base = 0; base < real; base += blockDim.x) {
      const int64_t j = base + tid;
      bool eq = false;
      if (j < real) {
        const uint32_t u = order_key(x[j]);
        if (u > prefix) chosen[atomicAdd(&s_greater, 1)] = static_cast<int>(j);
        eq = u == prefix;
      }
      const unsigned ballot = __ballot_sync(0xffffffffu, eq);
      if (lane == 0) warp_ties[warp] = __popc(ballot);
      __syncthreads();
      int before = s_ties + __popc(ballot & ((1u << lane) - 1u));
      for (int w = 0; w < warp; ++w) before += warp_ties[w];
      if (eq && before < remaining) chosen[greater + before] = static_cast<int>(j);
      __syncthreads();
      if (tid == 0) {
        int t = 0;
        for (int w = 0; w < kWarps; ++w) t += warp_ties[w];
        s_ties += t;
      }
      __syncthreads();
    }
    for (int i = tid; i < take; i += blockDim.x) keys[i] = full_key(x[chosen[i]], chosen[i]);
    __syncthreads();
    for (int i = tid; i < take; i += blockDim.x) {  // rank = how many chosen keys are larger
      int rank = 0;
      for (int t = 0; t < take; ++t) rank += keys[t] > keys[i] ? 1 : 0;
      const int j = chosen[i];
      if (rank < k) v[rank] = x[j], c[rank] = j;
      if (rank == 0) s_max = x[j];
    }
  }
  if (!stats) return;
  __syncthreads();
  const float mx = s_max;
  double s = 0;
  for (int64_t j = tid; j < real; j += blockDim.x) s += exp(static_cast<double>(x[j]) - static_cast<double>(mx));
  s = cuda::detail::block_reduce(s, cuda::detail::Sum{}, 0.0);
  if (tid == 0) stats[2 * blockIdx.x] = mx, stats[2 * blockIdx.x + 1] = static_cast<float>(s);
}

}  // namespace

void cuda::top_candidates(const TensorView& logits, int64_t real_cols, const TensorView& values,
                          const TensorView& columns, const TensorView& stats) {
  const auto [rows, k] = top_candidates_check(logits, real_cols, values, columns, stats);
  if (k > kMaxDeviceTopCandidates) {
    OLMO2_THROW(ShapeError, "cuda::top_candidates: k ", k, " above the device limit ", kMaxDeviceTopCandidates,
                " (copy the rows to the host instead)");
  }
  if (rows == 0 || (k == 0 && stats.empty())) return;
  if (rows > std::numeric_limits<int32_t>::max() || real_cols >= std::numeric_limits<int32_t>::max()) {
    OLMO2_THROW(ShapeError, "cuda::top_candidates: logits ", logits.shape_str(), " too large");
  }
  const int take = static_cast<int>(std::min<int64_t>(std::max<int64_t>(k, 1), real_cols));
  OLMO2_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, compute_stream(), top_candidates_kernel)(
      static_cast<const float*>(logits.data()), logits.stride(0), real_cols, static_cast<int>(k), take,
      k > 0 ? static_cast<float*>(values.data()) : nullptr, k > 0 ? static_cast<int32_t*>(columns.data()) : nullptr,
      stats.empty() ? nullptr : static_cast<float*>(stats.data()));
  OLMO2_CUDA_CHECK_LAUNCH("top_candidates_kernel");
}

}  // namespace olmo2::ops
