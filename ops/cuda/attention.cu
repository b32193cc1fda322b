// CUDA causal attention (training and prefill) and its max-logit monitor: the tile
// kernel of attention_tile.cuh over contiguous keys (docs/architecture.md §2).
//
// Rounding (act = bf16) matches ops::cpu::causal_attention point for point: the score
// q·k is rounded, scaled and rounded again, the probabilities exp(s − max)·(1/sum) are
// rounded, and the output. Rounding a probability needs the row's final max and sum, so
// bf16 takes two passes over the keys (max and sum, then probabilities times V); f32
// takes one, rescaling the running sum and output as the max grows. Scores are never
// stored: memory is O(rows·hd) per block whatever T is.
#include <cuda_runtime.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/cuda/attention_tile.cuh"
#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/runtime.h"

namespace olmo2::ops {
namespace cuda::attention_detail {

int dims_per_lane(int64_t hd, const char* op) {
  OLMO2_CHECK(hd <= kMaxHeadDim, op, ": head dim ", hd, " is above the CUDA kernels' limit of ", kMaxHeadDim);
  return hd <= 32 ? 1 : hd <= 64 ? 2 : hd <= 128 ? 4 : 8;
}

namespace {

template <int NJ, Mode M, int WARPS>
void launch_one(const TileArgs& a, int64_t n_tiles, int n_heads) {
  const size_t smem = tile_smem_bytes(WARPS, NJ, a.hd);
  auto* kernel = &attention_tile_kernel<NJ, M, WARPS>;
  if (smem > 48 * 1024) {
    OLMO2_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(n_heads));
  OLMO2_LAUNCH(grid, 32 * WARPS, smem, compute_stream(), kernel)(a);
  OLMO2_CUDA_CHECK_LAUNCH("attention_tile_kernel");
}

template <int NJ>
void launch_nj(Mode mode, int warps, const TileArgs& a, int64_t n_tiles, int n_heads) {
  if (mode == Mode::kOnline) {
    warps == 1 ? launch_one<NJ, Mode::kOnline, 1>(a, n_tiles, n_heads) : launch_one<NJ, Mode::kOnline, 4>(a, n_tiles, n_heads);
  } else {
    warps == 1 ? launch_one<NJ, Mode::kTwoPass, 1>(a, n_tiles, n_heads)
               : launch_one<NJ, Mode::kTwoPass, 4>(a, n_tiles, n_heads);
  }
}

}  // namespace

void launch_tiles(Mode mode, int warps, const TileArgs& a, int64_t n_tiles, int n_heads) {
  if (n_tiles == 0 || n_heads == 0) return;
  OLMO2_CHECK(n_tiles <= std::numeric_limits<int32_t>::max() && n_heads <= 65535, "attention: grid of ", n_tiles,
              " tiles × ", n_heads, " heads is too large");
  if (mode == Mode::kMaxLogit) return launch_one<1, Mode::kMaxLogit, 4>(a, n_tiles, n_heads);
  switch (dims_per_lane(a.hd, "attention")) {
    case 1: return launch_nj<1>(mode, warps, a, n_tiles, n_heads);
    case 2: return launch_nj<2>(mode, warps, a, n_tiles, n_heads);
    case 4: return launch_nj<4>(mode, warps, a, n_tiles, n_heads);
    default: return launch_nj<8>(mode, warps, a, n_tiles, n_heads);
  }
}

}  // namespace cuda::attention_detail

namespace {

using cuda::attention_detail::kRowsPerWarp;

// The checks of ops::cpu::causal_attention, plus f32 CUDA views; returns hd.
int64_t check_attention(const char* op, const TensorView& q, const TensorView& k, int n_heads, int n_kv_heads) {
  OLMO2_CHECK(q.dim() == 2 && k.dim() == 2, op, " wants 2-d views, got q ", q.shape_str(), " k ", k.shape_str());
  OLMO2_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, op, ": heads ", n_heads, " kv heads ",
              n_kv_heads);
  const int64_t hd = q.size(1) / n_heads;
  OLMO2_CHECK(q.size(1) == hd * n_heads && k.size(1) == hd * n_kv_heads && k.size(0) >= q.size(0), op, ": q ",
              q.shape_str(), " k ", k.shape_str(), " heads ", n_heads, "/", n_kv_heads);
  for (const TensorView* t : {&q, &k}) {
    OLMO2_CHECK(t->dtype() == DType::F32 && t->device() == Device::CUDA && t->stride(1) == 1, op,
                " wants f32 CUDA views with contiguous rows, got ", dtype_name(t->dtype()), " ", t->shape_str());
  }
  return hd;
}

cuda::attention_detail::TileArgs causal_args(const TensorView& q, const TensorView& k, int n_heads,
                                             int n_kv_heads, int64_t hd, int64_t window) {
  cuda::attention_detail::TileArgs a{};
  a.q = static_cast<const float*>(q.data()), a.q_ld = q.stride(0);
  a.k = static_cast<const float*>(k.data()), a.k_ld = k.stride(0);
  a.hd = static_cast<int>(hd), a.group = n_heads / n_kv_heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.t_len = q.size(0), a.past = k.size(0) - q.size(0);
  a.window = window;
  return a;
}

}  // namespace

void cuda::causal_attention(const TensorView& q, const TensorView& k, const TensorView& v, int n_heads,
                            int n_kv_heads, const TensorView& out, DType act, int64_t window) {
  const int64_t hd = check_attention("causal_attention", q, k, n_heads, n_kv_heads);
  OLMO2_CHECK(v.dim() == 2 && out.dim() == 2 && v.shape() == k.shape() && out.shape() == q.shape(),
              "causal_attention: q ", q.shape_str(), " k ", k.shape_str(), " v ", v.shape_str(), " out ",
              out.shape_str());
  for (const TensorView* t : {&v, &out}) {
    OLMO2_CHECK(t->dtype() == DType::F32 && t->device() == Device::CUDA && t->stride(1) == 1,
                "causal_attention wants f32 CUDA views with contiguous rows, got ", dtype_name(t->dtype()), " ",
                t->shape_str());
  }
  OLMO2_CHECK(act == DType::F32 || act == DType::BF16, "causal_attention: act ", dtype_name(act));
  OLMO2_CHECK(window >= 0, "attention: window ", window, " is negative (0 means no window)");
  if (q.size(0) == 0 || hd == 0) return;
  attention_detail::TileArgs a = causal_args(q, k, n_heads, n_kv_heads, hd, window);
  a.v = static_cast<const float*>(v.data()), a.v_ld = v.stride(0);
  a.out = static_cast<float*>(out.data()), a.o_ld = out.stride(0);
  constexpr int kWarps = 4;
  const int64_t tiles = (q.size(0) + kRowsPerWarp * kWarps - 1) / (kRowsPerWarp * kWarps);
  attention_detail::launch_tiles(act == DType::BF16 ? attention_detail::Mode::kTwoPass : attention_detail::Mode::kOnline,
                                 kWarps, a, tiles, n_heads);
}

namespace {

// The largest of n values into out[0]; one block of 256 threads.
__global__ void max_reduce_kernel(const float* x, int64_t n, float* out) {
  __shared__ float part[256];
  float best = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) best = fmaxf(best, x[i]);
  part[threadIdx.x] = best;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = part[0];
}

}  // namespace

float cuda::causal_attention_max_logit(const TensorView& q, const TensorView& k, int n_heads, int n_kv_heads,
                                       int64_t window) {
  const int64_t hd = check_attention("causal_attention_max_logit", q, k, n_heads, n_kv_heads);
  OLMO2_CHECK(window >= 0, "causal_attention_max_logit: window ", window, " is negative (0 means no window)");
  // No pairs, or empty heads (the CPU's 0·∞ scores are NaN, which its max skips).
  if (q.size(0) == 0 || hd == 0) return -std::numeric_limits<float>::infinity();
  attention_detail::TileArgs a = causal_args(q, k, n_heads, n_kv_heads, hd, window);
  constexpr int kRows = kRowsPerWarp * 4;
  const int64_t tiles = (q.size(0) + kRows - 1) / kRows;
  const int64_t n_blocks = tiles * n_heads;
  float* partial = static_cast<float*>(device_malloc(sizeof(float) * (n_blocks + 1)));
  float result = 0.0f;
  try {
    a.block_max = partial;
    attention_detail::launch_tiles(attention_detail::Mode::kMaxLogit, 4, a, tiles, n_heads);
    OLMO2_LAUNCH(1, 256, 0, compute_stream(), max_reduce_kernel)(partial, n_blocks, partial + n_blocks);
    OLMO2_CUDA_CHECK_LAUNCH("max_reduce_kernel");
    OLMO2_CUDA_CHECK(
        cudaMemcpyAsync(&result, partial + n_blocks, sizeof(float), cudaMemcpyDeviceToHost, compute_stream()));
    synchronize();
  } catch (...) {
    device_free(partial);
    throw;
  }
  device_free(partial);
  return result;
}

}  // namespace olmo2::ops
