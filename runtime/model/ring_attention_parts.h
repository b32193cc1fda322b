// What ring_attention_forward and ring_attention_backward share (ring_attention.cpp,
// ring_attention_backward.cpp): the runs of consecutive positions a rank holds, which
// pairs of runs attend each other, the query tiles and their key columns, the checks
// and the ring shift (docs/architecture.md §7 "Context parallelism: ring attention").
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ops/tensor.h"
#include "parallel/communicator.h"
#include "runtime/model/ring_attention.h"

namespace olmo2::ring_parts {

/// Query rows per score tile: a tile is kQueryTile × (one run of keys) f32 per thread.
inline constexpr int64_t kQueryTile = 128;

/// Rows [row, row + len) of a rank hold positions [pos, pos + len) of sequence `seq`.
struct Run {
  int32_t seq = 0;
  int64_t pos = 0, row = 0, len = 0;
};

/// The runs of rank `rank` (two per sequence, in row order), from shard.lengths alone.
std::vector<Run> runs_of(const ContextShard& shard, int rank);

/// The (query run, key run) pairs of the same sequence with some allowed (query, key):
/// key position ≤ query position and, when window > 0, query − key < window.
struct RunPair {
  Run q, k;
};
std::vector<RunPair> computed_pairs(const std::vector<Run>& q_runs, const std::vector<Run>& k_runs,
                                    int64_t window, int64_t* pairs_total = nullptr);

/// Key columns [lo, hi) of run `k` (relative to its first row) that query position `p`
/// may attend; lo ≥ hi when none.
inline void key_range(const Run& k, int64_t p, int64_t window, int64_t& lo, int64_t& hi) {
  hi = std::min(k.len, p - k.pos + 1);
  lo = window > 0 ? std::max<int64_t>(0, p - window + 1 - k.pos) : 0;
}

/// Heads and shapes checked alike by forward and backward; returns hd. ShapeError when
/// the rows are not shard.rows(cp.rank()), the widths not H·hd / KV·hd, H % KV ≠ 0,
/// cp.size() ≠ shard.cp, window < 0, or a view is not f32 with contiguous rows.
int64_t check_shapes(const char* op, const parallel::Communicator& cp, const ContextShard& shard,
                     const TensorView& q, const TensorView& k, const TensorView& v, int n_heads,
                     int n_kv_heads, int64_t window);

/// Copies rows of `src` (contiguous rows of `width` floats, row stride src.stride(0)) into
/// dst (dense), and back.
void pack_rows(const TensorView& src, float* dst);
void unpack_rows(const float* src, const TensorView& dst);

/// One ring step in place: sends the `n` floats of `data` to cp rank + 1 and replaces them
/// with the `n` floats of cp rank − 1. Blocking, in pieces of at most kRingPiece floats so
/// that only one piece (in `spare`) is held twice; per piece, even ranks send first and
/// odd ranks receive first (into `spare`), so no rank waits on a peer that waits on it; at
/// cp 2 (next = previous) one send_recv per piece.
inline constexpr int64_t kRingPiece = int64_t{1} << 20;
void ring_shift(parallel::Communicator& cp, float* data, int64_t n, int tag, std::vector<float>& spare);

/// Visits the K/V blocks of every rank in ring order: hop h hands `visit` the pairs of
/// this rank's runs with rank (j−h)'s (computed_pairs; not called when none), the block in
/// hand being rank (j−h)'s; between hops the first `moved` floats of `block` go one rank on
/// (ring_shift with `tag`). `block` starts as this rank's and ends as rank j+1's.
void ring_pass(parallel::Communicator& cp, const ContextShard& shard, int64_t window, std::vector<float>& block,
               int64_t moved, int tag, std::vector<float>& spare,
               const std::function<void(const std::vector<RunPair>&)>& visit);

/// Per (query row, head) [rows·H]: m the running max, l the running sum of exp(score − m)
/// (FlashAttention's m and ℓ) of the scores the output is built from; m32/l32 the same of
/// the f32 scores, kept apart only when bf16 rounds the others.
struct SoftmaxState {
  std::vector<float> m, l, m32, l32;
};

/// How attend_block treats a block's scores x (scaled; rounded to bf16 as the reference
/// rounds q·kᵀ and the scaled scores when `round` is set):
///  - Online: merged into (m, l), the output rows rescaled by exp(m − m') and P·V added
///    with P = exp(x − m') (one pass; the output is divided by l at the end);
///  - Stats: merged into (m, l) (and, with `round`, the f32 scores into (m32, l32)); no P·V;
///  - Normalised: P = exp(x − m)/l with the final (m, l), rounded to bf16 with `round`,
///    and P·V added (the reference's order of operations: the second pass).
enum class Pass { Online, Stats, Normalised };

/// Query heads [h_begin, h_end) of this rank's rows q against one K/V block (kb, vb:
/// [rows, KV·hd] dense, query head h on kv head h/(H/KV)), tiles of kQueryTile rows over
/// the `pairs`' runs; out [rows, H·hd] accumulates P·V; `tile` is the caller's scratch.
struct Heads {
  int n_heads, n_kv_heads;
  int64_t hd, window;
  bool round;
};
void attend_block(Pass pass, const Heads& hs, const std::vector<RunPair>& pairs, const TensorView& q,
                  const float* kb, const float* vb, int64_t kvw, SoftmaxState& st, const TensorView& out);

/// C[m, n] = alpha·op(A)·op(B) + beta·C, row-major f32 (cblas_sgemm).
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace olmo2::ring_parts
