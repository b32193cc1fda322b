// Causal attention over a paged KV cache (fixed-size blocks, per-sequence block tables).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/tensor.h"

namespace olmo2::ops {

/// One sequence's part of a paged-attention batch.
struct PagedSequence {
  int64_t row_begin = 0;  ///< first row of this sequence's new tokens in q and out
  int64_t rows = 0;       ///< new tokens (queries) of this sequence, ≥ 1
  int64_t start = 0;      ///< position of the first new token (tokens already cached)
  std::span<const int32_t> block_table;  ///< KV blocks of positions 0, bs, 2·bs, …
};

/// Causal attention of each sequence's new tokens over its cached keys and values.
/// q [T, H·hd]: rows row_begin … row_begin+rows−1 are the queries of positions
/// start … start+rows−1. k_pool, v_pool [num_blocks·block_size, KV·hd], both f32 or both
/// bf16 (a bf16 KV cache, docs/architecture.md §3.2: widened exactly, so the result is the
/// bits an f32 pool holding the same values gives); q, out f32. Position p of
/// a sequence lives in row block_table[p / block_size]·block_size + p % block_size
/// (the caller has already written the new tokens' keys and values there). Query t
/// sees positions 0 … start+t; with `window` > 0 only max(0, start+t−window+1) … start+t
/// (a sliding-window layer, as `causal_attention`), and the table's entries for blocks
/// wholly before every query's window are never read (they may be −1: blocks freed for
/// sliding layers, docs/architecture.md §8). out [T, H·hd], only the sequences' rows written.
/// Scale 1/sqrt(hd), softmax in fp32, GQA (query head h uses kv head h / (H/KV));
/// `act` = bf16 rounds scores, probabilities and output as `causal_attention` does.
/// Batch-invariant: each (row, head) is computed alone in a fixed order, so its result
/// does not depend on the other sequences, on how a prompt is split into chunks, or on
/// the thread count. On the CPU, tiles of up to 16 rows that read the same kv head share
/// each key and value row loaded, on the code path paged_attention_path() names (every
/// path, every tiling the same bits; docs/architecture.md §2, "Paged attention (CPU)").
/// Source: PagedAttention (Kwon et al., SOSP 2023) for the layout,
/// `eager_attention_forward` in transformers' modeling_olmo2.py for the math.
/// Throws ShapeError on inconsistent shapes, H % KV ≠ 0, or a block table too short
/// for start + rows positions; InputError for a block id outside the pool (among the
/// blocks read).
void paged_attention(const TensorView& q, const TensorView& k_pool, const TensorView& v_pool,
                     int64_t block_size, const std::vector<PagedSequence>& sequences, int n_heads,
                     int n_kv_heads, const TensorView& out, DType act = DType::F32, int64_t window = 0);

/// A code path of the CPU paged attention's tile kernels; every path gives the same bits.
enum class PagedAttentionPath {
  Avx2,      ///< 8-lane dots in one ymm, register tiles of several rows (cpuid avx2, fma)
  Portable,  ///< plain loops, any CPU
};

/// The path's name as OLMO2_PAGED_ATTENTION spells it: "avx2", "portable".
const char* paged_attention_path_name(PagedAttentionPath path);

/// Whether this CPU can run `path` (cpuid, read once). Portable: always.
bool paged_attention_path_available(PagedAttentionPath path);

/// The path paged_attention takes now on the CPU: the one set by
/// set_paged_attention_path, else the one OLMO2_PAGED_ATTENTION names (avx2|portable,
/// read once), else the fastest this CPU has. Throws InputError naming the value when
/// the variable names no path or one this CPU lacks.
PagedAttentionPath paged_attention_path();

/// Forces `path` process-wide (tests and benchmarks; not while an attention runs on
/// another thread). Throws ShapeError when this CPU lacks it.
void set_paged_attention_path(PagedAttentionPath path);

/// Undoes set_paged_attention_path.
void reset_paged_attention_path();

}  // namespace olmo2::ops
