// The tile kernels of the CPU paged attention (docs/architecture.md §2, "Paged
// attention (CPU)"), one set per code path. Internal to ops/cpu.
//
// A tile is up to kTileRows query rows that read the same kv head (several positions of
// one sequence, times the query heads of a GQA group) against the keys they see. Every
// (row, head) keeps the operation sequence of the one-row kernel: each score is one
// fixed-order dot (8 lanes over hd in steps of 8, the tail folded into lanes 0…, then
// ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7))), one multiply and one add per lane step, never a
// fused one; the output is o += p_j · v_j elementwise with j increasing, from +0. The
// vector paths only change which independent dots and elements run side by side, so
// every path gives the same bits, whatever the tiling.
#pragma once

#include <cstdint>

namespace olmo2::ops::detail {

/// Rows per tile: each key and value row loaded serves up to this many query rows.
inline constexpr int kTileRows = 16;

/// One tile: rows r = 0 … rows−1, keys j0 … j1−1 (absolute positions).
struct AttnTile {
  int rows = 0;
  int64_t hd = 0;
  int64_t j0 = 0, j1 = 0;
  const float* q[kTileRows] = {};    ///< row r's query head (hd floats)
  float* o[kTileRows] = {};          ///< row r's output head (hd floats)
  int64_t first[kTileRows] = {};     ///< row r sees keys first[r] … visible[r]−1, all in [j0, j1)
  int64_t visible[kTileRows] = {};
  const float* const* k = nullptr;   ///< k[j − j0]: key j's kv head (hd floats)
  const float* const* v = nullptr;   ///< v[j − j0]: value j's kv head (hd floats)
  float* sc = nullptr;               ///< sc[r·sc_ld + j − j0]: scores, then probabilities
  int64_t sc_ld = 0;
};

/// Scores of every row against every key of [j0, j1): d = the fixed-order dot, stored as
/// d·scale (f32) or round_bf16(round_bf16(d)·scale) (bf16 activations). Pairs outside a
/// row's own range are computed too (never read).
void attn_scores_portable(const AttnTile& t, float scale, bool bf16);
void attn_scores_avx2(const AttnTile& t, float scale, bool bf16);

/// o_r = Σ_{j = first[r]}^{visible[r]−1} p_rj · v_j (p = sc), elementwise, j increasing,
/// from +0 (o is overwritten).
void attn_pv_portable(const AttnTile& t);
void attn_pv_avx2(const AttnTile& t);

/// Row r's probabilities in place: p_j = exp(s_j − max) · (1 / Σ exp) over its own range,
/// the max and the sum in increasing j (std::exp, the same libm call as the one-row
/// kernel), then bf16-rounded when `bf16`. The vectorised max and the final scaling
/// give the same bits as the scalar loops (a max ignores NaN scores as std::max does).
void attn_softmax_rows_portable(const AttnTile& t, bool bf16);
void attn_softmax_rows_avx2(const AttnTile& t, bool bf16);

/// Sequences with at most this many new rows (decode steps, small chunks) take the
/// one-row path: each row walks whole key and value rows once for all its heads, as a
/// decode batch wants; longer ones are cut into tiles (docs/architecture.md §2).
/// 2 measured best: the one-row path is 0.7–0.85× the tiled one's time at 1 new row
/// per sequence, ~0.9× at 2, even at 3, slower from 4 (64 sequences × 512 positions,
/// bench/README.md, "Prefill attention"). Benchmarks may move it (set_row_path_max_rows, not thread-safe against a
/// running call); a row's result is the same on either path.
inline constexpr int64_t kRowPathMaxRows = 2;
int64_t row_path_max_rows();
void set_row_path_max_rows(int64_t rows);

/// One key row against one query row's heads h0 … h1−1: s[(h−h0)·s_ld] = the fixed-order
/// dot of q + h·hd and k + (h/group)·hd, scaled as attn_scores_* store it.
void attn_row_scores_portable(const float* q, const float* k, int h0, int h1, int group, int64_t hd, float scale,
                              bool bf16, float* s, int64_t s_ld);
void attn_row_scores_avx2(const float* q, const float* k, int h0, int h1, int group, int64_t hd, float scale,
                          bool bf16, float* s, int64_t s_ld);

/// One value row into one query row's heads h0 … h1−1: o + h·hd += p[(h−h0)·p_ld] ·
/// (v + (h/group)·hd), elementwise (one multiply, one add).
void attn_row_pv_portable(const float* p, int64_t p_ld, const float* v, int h0, int h1, int group, int64_t hd,
                          float* o);
void attn_row_pv_avx2(const float* p, int64_t p_ld, const float* v, int h0, int h1, int group, int64_t hd, float* o);

/// cpuid: AVX2 and FMA (the path itself uses no fused operation).
bool attn_has_avx2();

}  // namespace olmo2::ops::detail
