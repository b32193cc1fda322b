// The forward attention tile shared by `causal_attention`, `causal_attention_max_logit`
// and `paged_attention` on CUDA (docs/architecture.md §2). One block computes up to
// 4·WARPS consecutive query rows of one sequence for one query head; keys are visited in
// tiles of 32 positions aligned to multiples of 32 (from position 0, or with a sliding
// window from the tile holding the block's first visible key), staged in shared memory,
// one key per lane; each warp owns 4 rows. A row skips the tiles wholly before its own
// window (docs/architecture.md §3), so what a row computes depends only on its query
// vector, its keys and values, its window and its last visible position — not on the
// other rows of its block, the block size or the batch — which is what makes
// `paged_attention` batch-invariant and chunking-invariant (the same bits as
// `causal_attention`). Keys before the block's first visible key are never loaded (a
// paged table's entries there may be −1).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/launch.cuh"

namespace olmo2::ops::cuda::attention_detail {

constexpr int kKeyTile = 32;    // keys per tile: one per lane
constexpr int kRowsPerWarp = 4;
constexpr int kMaxHeadDim = 256;  // 8 dims per lane

/// What a tile kernel computes.
enum class Mode {
  kOnline,   // f32 act: one pass, running max and sum (flash-attention style)
  kTwoPass,  // bf16 act: pass 1 max and sum, pass 2 rounded probabilities times V
  kMaxLogit  // the largest scaled score of the block, into `block_max`
};

/// Query rows of one block: rows row0 … row0+nrows−1 of q/out are positions
/// pos0 … pos0+nrows−1 and see keys 0 … pos0+i (with TileArgs::window > 0 only
/// max(0, pos0+i−window+1) … pos0+i); key position p is row `p` of k/v, or
/// row table[p / block_size]·block_size + p % block_size when `table` is set (paged).
struct TileDesc {
  int64_t row0;
  int64_t pos0;
  int32_t nrows;
  int32_t table_offset;  // into the packed tables; −1: keys are contiguous rows
};

struct TileArgs {
  const float* q;
  int64_t q_ld;
  const float* k;
  int64_t k_ld;
  const float* v;
  int64_t v_ld;
  // bf16 keys and values (a bf16 KV cache, docs/architecture.md §3.2), read instead of k
  // and v when k16 is set (same strides), widened exactly: the bits of f32 pools holding them.
  const unsigned short* k16;
  const unsigned short* v16;
  float* out;
  int64_t o_ld;
  int hd;
  int group;  // query heads per kv head
  float scale;
  int64_t window;  // 0: none; else a row at position p sees keys p−window+1 … p
  // Causal (tiles == nullptr): block x covers rows x·rows_per_block … of T, past = S − T.
  int64_t t_len;
  int64_t past;
  // Paged: one descriptor per block x, block tables packed back to back.
  const TileDesc* tiles;
  const int32_t* tables;
  int64_t block_size;
  float* block_max;  // kMaxLogit: one value per block (x + y·gridDim.x)
};

__device__ inline float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ inline float warp_max(float x) {
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

__device__ inline float warp_sum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

/// Floats of dynamic shared memory a tile kernel needs: q [4·WARPS][hd], k [32][hd+1]
/// (padded: lane c reads row c), v [32][32·NJ] (zero beyond hd).
inline size_t tile_smem_bytes(int warps, int nj, int hd) {
  return sizeof(float) * (static_cast<size_t>(kRowsPerWarp * warps) * hd +
                          static_cast<size_t>(kKeyTile) * (hd + 1) + static_cast<size_t>(kKeyTile) * 32 * nj);
}

/// Grid: x = tile (causal: ⌈T / (4·WARPS)⌉; paged: one per descriptor), y = query head.
/// Block: 32·WARPS threads. NJ = ⌈hd/32⌉ rounded up to 1, 2, 4 or 8.
template <int NJ, Mode M, int WARPS>
__global__ void __launch_bounds__(32 * WARPS) attention_tile_kernel(TileArgs a) {
  constexpr int kRows = kRowsPerWarp * WARPS;
  constexpr int kVStride = 32 * NJ;
  OLMO2_DYNAMIC_SHARED(float, smem);
  const int hd = a.hd;
  float* qs = smem;
  float* ks = qs + kRows * hd;
  float* vs = ks + kKeyTile * (hd + 1);

  TileDesc tile;
  if (a.tiles == nullptr) {
    tile.row0 = static_cast<int64_t>(blockIdx.x) * kRows;
    tile.pos0 = a.past + tile.row0;
    tile.nrows = static_cast<int32_t>(a.t_len - tile.row0 < kRows ? a.t_len - tile.row0 : kRows);
    tile.table_offset = -1;
  } else {
    tile = a.tiles[blockIdx.x];
  }
  const int32_t* table = tile.table_offset >= 0 ? a.tables + tile.table_offset : nullptr;
  const int h = static_cast<int>(blockIdx.y);
  const int kvh = h / a.group;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int wr0 = warp * kRowsPerWarp;
  const int wrows = max(0, min(kRowsPerWarp, tile.nrows - wr0));  // uniform across the warp

  for (int i = static_cast<int>(threadIdx.x); i < kRows * hd; i += blockDim.x) {
    const int r = i / hd, d = i % hd;
    qs[i] = r < tile.nrows ? a.q[(tile.row0 + r) * a.q_ld + static_cast<int64_t>(h) * hd + d] : 0.0f;
  }
  const int64_t kend = tile.pos0 + tile.nrows;  // keys kfirst … kend−1 are seen by some row
  const int64_t kfirst = a.window > 0 && tile.pos0 - a.window + 1 > 0 ? tile.pos0 - a.window + 1 : 0;
  const int64_t kstart = kfirst / kKeyTile * kKeyTile;  // tiles stay aligned to positions

  float m[kRowsPerWarp], l[kRowsPerWarp], inv[kRowsPerWarp], o[kRowsPerWarp][NJ];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    m[i] = -INFINITY, l[i] = 0.0f, inv[i] = 0.0f;
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) o[i][jj] = 0.0f;
  }
  float best = -INFINITY;

  constexpr int kPasses = M == Mode::kTwoPass ? 2 : 1;
  for (int pass = 0; pass < kPasses; ++pass) {
    const bool stats = M != Mode::kTwoPass || pass == 0;  // this pass finds max and sum
    const bool use_v = M == Mode::kOnline || pass == 1;
    for (int64_t k0 = kstart; k0 < kend; k0 += kKeyTile) {
      __syncthreads();  // the previous tile is no longer read
      for (int i = static_cast<int>(threadIdx.x); i < kKeyTile * hd; i += blockDim.x) {
        const int c = i / hd, d = i % hd;
        const int64_t p = k0 + c;
        float kx = 0.0f, vx = 0.0f;
        if (p >= kfirst && p < kend) {
          const int64_t row = table ? static_cast<int64_t>(table[p / a.block_size]) * a.block_size + p % a.block_size : p;
          const int64_t kat = row * a.k_ld + static_cast<int64_t>(kvh) * hd + d;
          const int64_t vat = row * a.v_ld + static_cast<int64_t>(kvh) * hd + d;
          kx = a.k16 ? __bfloat162float(__ushort_as_bfloat16(a.k16[kat])) : a.k[kat];
          if (use_v) vx = a.k16 ? __bfloat162float(__ushort_as_bfloat16(a.v16[vat])) : a.v[vat];
        }
        ks[c * (hd + 1) + d] = kx;
        if (use_v) vs[c * kVStride + d] = vx;
      }
      if (use_v) {
        for (int i = static_cast<int>(threadIdx.x); i < kKeyTile * (kVStride - hd); i += blockDim.x) {
          vs[(i / (kVStride - hd)) * kVStride + hd + i % (kVStride - hd)] = 0.0f;
        }
      }
      __syncthreads();

      // This lane's key, scored against each of the warp's rows (−∞ where not visible).
      const int64_t key = k0 + lane;
      // The warp's 4 dots side by side (4 independent chains; each still sums d in
      // increasing order, so a row's dot does not depend on the other rows).
      float dot[kRowsPerWarp] = {0.0f, 0.0f, 0.0f, 0.0f};
      const float* kr = ks + lane * (hd + 1);
      const float* q0 = qs + wr0 * hd;
      for (int d = 0; d < hd; ++d) {
        const float kd = kr[d];
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) dot[i] = fmaf(q0[i * hd + d], kd, dot[i]);
      }
      float x[kRowsPerWarp];
      bool before[kRowsPerWarp];  // the whole tile is before row i's window (warp-uniform)
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int64_t pos = tile.pos0 + wr0 + i;
        const int64_t lo = a.window > 0 ? pos - a.window + 1 : 0;  // the row's first key (may be < 0)
        before[i] = k0 + kKeyTile <= lo;
        // bf16: the reference's q·kᵀ is a bf16 tensor, scaled into another one.
        const float s = M == Mode::kTwoPass ? round_bf16(round_bf16(dot[i]) * a.scale) : dot[i] * a.scale;
        x[i] = i < wrows && key <= pos && key >= lo ? s : -INFINITY;
      }
      if constexpr (M == Mode::kMaxLogit) {
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
          if (!before[i]) best = fmaxf(best, x[i]);  // (x is −∞ there anyway)
        }
      } else {
        float p[kRowsPerWarp];
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
          p[i] = 0.0f;
          // A tile wholly before the row's window: skipped (p = 0 as the reference's masked
          // −∞ scores; the running max may still be −∞ here, so no update is made).
          if (i >= wrows || before[i]) continue;
          if (stats) {
            // Running max and sum; a tile with no visible key changes neither (corr = 1).
            const float mn = fmaxf(m[i], warp_max(x[i]));
            const float corr = expf(m[i] - mn);
            const float e = expf(x[i] - mn);
            l[i] = l[i] * corr + warp_sum(e);
            m[i] = mn;
            if (M == Mode::kOnline) {
#pragma unroll
              for (int jj = 0; jj < NJ; ++jj) o[i][jj] *= corr;
              p[i] = e;
            }
          } else {
            p[i] = round_bf16(expf(x[i] - m[i]) * inv[i]);  // the reference's bf16 probabilities
          }
        }
        if (use_v) {
          const int cmax = kend - k0 < kKeyTile ? static_cast<int>(kend - k0) : kKeyTile;
          for (int c = 0; c < cmax; ++c) {
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i) {
              if (i >= wrows || before[i]) continue;
              const float pc = __shfl_sync(0xffffffffu, p[i], c);
#pragma unroll
              for (int jj = 0; jj < NJ; ++jj) o[i][jj] = fmaf(pc, vs[c * kVStride + lane + 32 * jj], o[i][jj]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) inv[i] = 1.0f / l[i];
  }

  if constexpr (M == Mode::kMaxLogit) {
    __shared__ float warp_best[32];
    best = warp_max(best);
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < WARPS; ++w) best = fmaxf(best, warp_best[w]);
      a.block_max[blockIdx.x + static_cast<int64_t>(blockIdx.y) * gridDim.x] = best;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      if (i >= wrows) continue;
      float* orow = a.out + (tile.row0 + wr0 + i) * a.o_ld + static_cast<int64_t>(h) * hd;
#pragma unroll
      for (int jj = 0; jj < NJ; ++jj) {
        const int d = lane + 32 * jj;
        if (d < hd) orow[d] = M == Mode::kOnline ? o[i][jj] * inv[i] : round_bf16(o[i][jj]);
      }
    }
  }
}

/// NJ (dims per lane / 32) for a head dim: 1, 2, 4 or 8; ShapeError above kMaxHeadDim.
int dims_per_lane(int64_t hd, const char* op);

/// Launches attention_tile_kernel on the compute stream for `n_tiles` × `n_heads` blocks
/// of 32·warps threads (warps 1 or 4; kMaxLogit: 4), raising the shared-memory limit
/// when the head dim needs more than 48 KiB. Nothing for n_tiles = 0.
void launch_tiles(Mode mode, int warps, const TileArgs& a, int64_t n_tiles, int n_heads);

}  // namespace olmo2::ops::cuda::attention_detail
