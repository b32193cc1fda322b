#include "ops/paged_attention.h"

#include "ops/cpu/code_path_choice.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/paged_attention_detail.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace olmo2::ops {
namespace {

using detail::AttnTile;
using detail::kTileRows;

constexpr std::array<PagedAttentionPath, 2> kPaths{PagedAttentionPath::Avx2, PagedAttentionPath::Portable};

detail::CodePathChoice<PagedAttentionPath, 2>& choice() {
  static detail::CodePathChoice<PagedAttentionPath, 2> c("OLMO2_PAGED_ATTENTION", kPaths, &paged_attention_path_name,
                                                         &paged_attention_path_available);
  return c;
}

/// One tile of work: rows t0 … t1−1 of sequence `seq`, query heads h0 … h1−1 (all of
/// kv head h0 / group), keys j0 … j1−1.
struct TileItem {
  int32_t seq;
  int32_t h0, h1;
  int64_t t0, t1;
  int64_t j0, j1;
};

/// One row of a sequence that takes the one-row path.
struct RowItem {
  int32_t seq;
  int64_t t;
};

int64_t row_path_max = detail::kRowPathMaxRows;

}  // namespace

int64_t detail::row_path_max_rows() { return row_path_max; }
void detail::set_row_path_max_rows(int64_t rows) { row_path_max = rows; }

const char* paged_attention_path_name(PagedAttentionPath path) {
  return path == PagedAttentionPath::Avx2 ? "avx2" : "portable";
}

bool paged_attention_path_available(PagedAttentionPath path) {
  return path == PagedAttentionPath::Portable || detail::attn_has_avx2();
}

PagedAttentionPath paged_attention_path() { return choice().current(); }

void set_paged_attention_path(PagedAttentionPath path) { choice().force(path, "set_paged_attention_path"); }

void reset_paged_attention_path() { choice().reset(); }

void cpu::paged_attention(const TensorView& q, const TensorView& k_pool, const TensorView& v_pool,
                     int64_t block_size, const std::vector<PagedSequence>& sequences, int n_heads,
                     int n_kv_heads, const TensorView& out, DType act, int64_t window) {
  OLMO2_CHECK(q.dim() == 2 && k_pool.dim() == 2 && v_pool.dim() == 2 && out.dim() == 2,
              "paged attention wants 2-d views, got q ", q.shape_str(), " k_pool ",
              k_pool.shape_str(), " v_pool ", v_pool.shape_str(), " out ", out.shape_str());
  OLMO2_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, "paged attention: heads ",
              n_heads, " kv heads ", n_kv_heads);
  const int64_t hd = q.size(1) / n_heads;
  OLMO2_CHECK(hd > 0 && q.size(1) == hd * n_heads && out.shape() == q.shape() &&
                  k_pool.size(1) == hd * n_kv_heads && v_pool.shape() == k_pool.shape(),
              "paged attention: q ", q.shape_str(), " k_pool ", k_pool.shape_str(), " v_pool ",
              v_pool.shape_str(), " out ", out.shape_str(), " heads ", n_heads, "/", n_kv_heads);
  OLMO2_CHECK(
      q.stride(1) == 1 && k_pool.stride(1) == 1 && v_pool.stride(1) == 1 && out.stride(1) == 1,
      "paged attention needs contiguous rows");
  OLMO2_CHECK(block_size > 0 && k_pool.size(0) % block_size == 0, "paged attention: pool rows ",
              k_pool.size(0), " not a multiple of block size ", block_size);
  OLMO2_CHECK(window >= 0, "paged attention: window ", window, " is negative (0 means no window)");
  OLMO2_CHECK((k_pool.dtype() == DType::F32 || k_pool.dtype() == DType::BF16) && v_pool.dtype() == k_pool.dtype(),
              "paged attention: pools ", dtype_name(k_pool.dtype()), "/", dtype_name(v_pool.dtype()),
              " (f32 or bf16, both the same)");
  const int64_t num_blocks = k_pool.size(0) / block_size;
  const int64_t t_total = q.size(0);

  const PagedAttentionPath path = paged_attention_path();  // InputError for a bad override
  const int group = n_heads / n_kv_heads;
  // A tile holds the rows that read one kv head: up to kTileRows query heads of its
  // group, times as many positions as fit (docs/architecture.md §2, "Paged attention (CPU)").
  const int heads_per_tile = std::min(group, kTileRows);
  const int64_t rows_per_tile = std::max(1, kTileRows / heads_per_tile);

  // Validate every sequence up front and cut its rows into tiles.
  std::vector<TileItem> items;
  std::vector<RowItem> row_items;
  int64_t max_span = 0, max_row_span = 0, work = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const PagedSequence& seq = sequences[s];
    OLMO2_CHECK(seq.rows >= 1 && seq.start >= 0 && seq.row_begin >= 0 &&
                    seq.row_begin + seq.rows <= t_total,
                "paged attention: sequence ", s, " rows [", seq.row_begin, ", ",
                seq.row_begin + seq.rows, ") start ", seq.start, " outside q with ", t_total,
                " rows");
    const int64_t ctx = seq.start + seq.rows;
    const int64_t blocks = (ctx + block_size - 1) / block_size;
    OLMO2_CHECK(static_cast<int64_t>(seq.block_table.size()) >= blocks,
                "paged attention: sequence ", s, " needs ", blocks, " blocks for ", ctx,
                " positions (block size ", block_size, "), block table has ",
                seq.block_table.size());
    // Blocks wholly before the first row's window are never read (their entries may be
    // −1: freed for a sliding layer, docs/architecture.md §8), so not checked either.
    const int64_t first_read = window > 0 ? std::max<int64_t>(0, seq.start + 1 - window) / block_size : 0;
    for (int64_t b = first_read; b < blocks; ++b) {
      const int64_t id = seq.block_table[static_cast<size_t>(b)];
      if (id < 0 || id >= num_blocks) {
        OLMO2_THROW(InputError, "paged attention: sequence ", s, " block table entry ", b,
                    " is block ", id, ", outside the pool of ", num_blocks, " blocks");
      }
    }
    for (int64_t t = 0; t < seq.rows; ++t) {
      work += std::min(seq.start + t + 1, window > 0 ? window : seq.start + t + 1) * hd * n_heads;
    }
    if (seq.rows <= row_path_max) {
      // Few new rows (a decode step): each row walks whole key and value rows once for
      // all its heads, contiguous reads across the heads (docs/architecture.md §2).
      for (int64_t t = 0; t < seq.rows; ++t) row_items.push_back({static_cast<int32_t>(s), t});
      max_row_span = std::max(max_row_span, window > 0 ? std::min(window, ctx) : ctx);
      continue;
    }
    // Keys before a row's window are skipped, which gives the bits of the reference's
    // masked scores (exp(−∞) = 0 adds nothing).
    for (int kvh = 0; kvh < n_kv_heads; ++kvh) {
      for (int h0 = kvh * group; h0 < (kvh + 1) * group; h0 += heads_per_tile) {
        const int h1 = std::min(h0 + heads_per_tile, (kvh + 1) * group);
        for (int64_t t0 = (seq.rows - 1) / rows_per_tile * rows_per_tile; t0 >= 0; t0 -= rows_per_tile) {
          const int64_t t1 = std::min(seq.rows, t0 + rows_per_tile);
          const int64_t j0 = window > 0 ? std::max<int64_t>(0, seq.start + t0 + 1 - window) : 0;
          const int64_t j1 = seq.start + t1;
          max_span = std::max(max_span, j1 - j0);
          items.push_back({static_cast<int32_t>(s), h0, h1, t0, t1, j0, j1});
        }
      }
    }
  }
  if (items.empty() && row_items.empty()) return;
  // A head's tiles follow each other, its longest (last rows) first: the threads share
  // that head's keys and values in the cache, and the dynamic schedule ends on short
  // tiles. Which thread runs a tile, and when, changes no result: every (row, head) is
  // computed alone in a fixed order, whatever the tiling, the batch or the thread count.

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool bf16 = act == DType::BF16;
  const int64_t n_items = static_cast<int64_t>(items.size());
  // The one-row path's work item is one row and a contiguous range of heads, split into
  // just enough ranges to keep every thread busy; a head's operations do not depend on
  // the range it falls in.
  const int64_t n_rows = static_cast<int64_t>(row_items.size());
  const int64_t want = 4 * static_cast<int64_t>(omp_get_max_threads());
  const int64_t n_ranges = n_rows == 0 ? 1 : std::clamp<int64_t>((want + n_rows - 1) / n_rows, 1, n_heads);
  const int64_t n_row_items = n_rows * n_ranges;
  const int64_t range_heads = (n_heads + n_ranges - 1) / n_ranges;
  const float* qd = q.f32();
  const bool bf16_pools = k_pool.dtype() == DType::BF16;
  const float* kd = bf16_pools ? nullptr : k_pool.f32();
  const float* vd = bf16_pools ? nullptr : v_pool.f32();
  const uint16_t* kb = bf16_pools ? static_cast<const uint16_t*>(k_pool.data()) : nullptr;
  const uint16_t* vb = bf16_pools ? static_cast<const uint16_t*>(v_pool.data()) : nullptr;
  float* od = out.f32();
  const int64_t q_ld = q.stride(0), k_ld = k_pool.stride(0), v_ld = v_pool.stride(0),
                o_ld = out.stride(0);

#pragma omp parallel if (work > 32768)
  {
    // Per thread: the tile's scores (rows padded so that they do not alias in the cache),
    // its key and value row pointers, and the staged rows below.
    std::vector<float> scores(static_cast<size_t>(kTileRows * (max_span + 16)));
    std::vector<const float*> krows(static_cast<size_t>(max_span)), vrows(static_cast<size_t>(max_span));
    std::vector<float> staged_kv(bf16_pools ? static_cast<size_t>(2 * max_span * hd) : 0);
    std::vector<float> staged_qo(static_cast<size_t>(2 * kTileRows * hd));
    // The one-row path: scores of a range's heads, s_ld apart, and one widened key and
    // value row (bf16 pools).
    const int64_t s_ld = max_row_span + 16;
    std::vector<float> row_scores(n_rows > 0 ? static_cast<size_t>(range_heads * s_ld) : 0);
    std::vector<float> wide_kv(n_rows > 0 && bf16_pools ? static_cast<size_t>(2 * k_pool.size(1)) : 0);
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t i = 0; i < n_row_items; ++i) {
      const RowItem& item = row_items[static_cast<size_t>(i / n_ranges)];
      const int64_t range = i % n_ranges;
      const int h0 = static_cast<int>(range * n_heads / n_ranges);
      const int h1 = static_cast<int>((range + 1) * n_heads / n_ranges);
      const PagedSequence& seq = sequences[static_cast<size_t>(item.seq)];
      const int64_t row = seq.row_begin + item.t, visible = seq.start + item.t + 1;
      const int64_t first = window > 0 ? std::max<int64_t>(0, visible - window) : 0;
      const float* qr = qd + row * q_ld;
      float* orow = od + row * o_ld;
      // Only the kv heads of [h0, h1) are widened from a bf16 pool.
      const int64_t kv_lo = (h0 / group) * hd, kv_hi = ((h1 - 1) / group + 1) * hd;
      auto key_row = [&](int64_t pool_row, const uint16_t* pool, const float* pool_f32, int64_t ld, float* wide) {
        if (!bf16_pools) return pool_f32 + pool_row * ld;
        const uint16_t* src = pool + pool_row * ld;
        for (int64_t c = kv_lo; c < kv_hi; ++c) wide[c] = bf16_to_f32(src[c]);
        return static_cast<const float*>(wide);
      };
      float* sc = row_scores.data();  // sc[(h − h0)·s_ld + j − first]
      int64_t block = first / block_size, in_block = first % block_size;
      for (int64_t j = first; j < visible; ++j, ++in_block) {
        if (in_block == block_size) ++block, in_block = 0;
        const int64_t pr = static_cast<int64_t>(seq.block_table[static_cast<size_t>(block)]) * block_size + in_block;
        const float* kr = key_row(pr, kb, kd, k_ld, wide_kv.data());
        if (path == PagedAttentionPath::Avx2) {
          detail::attn_row_scores_avx2(qr, kr, h0, h1, group, hd, scale, bf16, sc + (j - first), s_ld);
        } else {
          detail::attn_row_scores_portable(qr, kr, h0, h1, group, hd, scale, bf16, sc + (j - first), s_ld);
        }
      }
      for (int h = h0; h < h1; ++h) {
        AttnTile one;
        one.rows = 1, one.hd = hd, one.j0 = first, one.j1 = visible;
        one.first[0] = first, one.visible[0] = visible;
        one.sc = row_scores.data() + (h - h0) * s_ld, one.sc_ld = s_ld;
        if (path == PagedAttentionPath::Avx2) {
          detail::attn_softmax_rows_avx2(one, bf16);
        } else {
          detail::attn_softmax_rows_portable(one, bf16);
        }
      }
      std::fill(orow + h0 * hd, orow + h1 * hd, 0.0f);
      block = first / block_size, in_block = first % block_size;
      for (int64_t j = first; j < visible; ++j, ++in_block) {
        if (in_block == block_size) ++block, in_block = 0;
        const int64_t pr = static_cast<int64_t>(seq.block_table[static_cast<size_t>(block)]) * block_size + in_block;
        const float* vr = key_row(pr, vb, vd, v_ld, wide_kv.data() + k_pool.size(1));
        if (path == PagedAttentionPath::Avx2) {
          detail::attn_row_pv_avx2(sc + (j - first), s_ld, vr, h0, h1, group, hd, orow);
        } else {
          detail::attn_row_pv_portable(sc + (j - first), s_ld, vr, h0, h1, group, hd, orow);
        }
      }
      if (bf16) round_to_dtype(orow + h0 * hd, static_cast<size_t>((h1 - h0) * hd), act);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_items; ++i) {
      const TileItem& item = items[static_cast<size_t>(i)];
      const PagedSequence& seq = sequences[static_cast<size_t>(item.seq)];
      const int64_t kv_off = (item.h0 / group) * hd, span = item.j1 - item.j0;
      // A tile of several rows reads its queries and writes its outputs through
      // contiguous copies: q's rows are a whole model width apart, which maps a tile's
      // rows onto the same few cache sets. A bf16 pool's key and value rows are widened
      // exactly (docs/architecture.md §3.2): the bits of an f32 pool holding the same values.
      const bool stage = (item.t1 - item.t0) * (item.h1 - item.h0) >= 4;
      int64_t block = item.j0 / block_size, in_block = item.j0 % block_size;
      for (int64_t j = item.j0; j < item.j1; ++j, ++in_block) {
        if (in_block == block_size) ++block, in_block = 0;
        const int64_t row = static_cast<int64_t>(seq.block_table[static_cast<size_t>(block)]) * block_size + in_block;
        const int64_t at = j - item.j0;
        if (bf16_pools) {
          float* kw = staged_kv.data() + at * hd;
          float* vw = kw + span * hd;
          const uint16_t* ks = kb + row * k_ld + kv_off;
          const uint16_t* vs = vb + row * v_ld + kv_off;
          for (int64_t c = 0; c < hd; ++c) kw[c] = bf16_to_f32(ks[c]), vw[c] = bf16_to_f32(vs[c]);
          krows[static_cast<size_t>(at)] = kw, vrows[static_cast<size_t>(at)] = vw;
        } else {
          krows[static_cast<size_t>(at)] = kd + row * k_ld + kv_off, vrows[static_cast<size_t>(at)] = vd + row * v_ld + kv_off;
        }
      }
      AttnTile tile;
      tile.hd = hd, tile.j0 = item.j0, tile.j1 = item.j1;
      tile.k = krows.data(), tile.v = vrows.data();
      tile.sc = scores.data(), tile.sc_ld = span + 16;
      float* out_rows[kTileRows];
      for (int64_t t = item.t0; t < item.t1; ++t) {
        const int64_t row = seq.row_begin + t, visible = seq.start + t + 1;
        for (int h = item.h0; h < item.h1; ++h, ++tile.rows) {
          const int r = tile.rows;
          out_rows[r] = od + row * o_ld + h * hd;
          if (stage) {
            float* qs = staged_qo.data() + r * hd;
            std::copy_n(qd + row * q_ld + h * hd, hd, qs);
            tile.q[r] = qs, tile.o[r] = staged_qo.data() + (kTileRows + r) * hd;
          } else {
            tile.q[r] = qd + row * q_ld + h * hd, tile.o[r] = out_rows[r];
          }
          tile.first[r] = window > 0 ? std::max<int64_t>(0, visible - window) : 0;
          tile.visible[r] = visible;
        }
      }
      if (path == PagedAttentionPath::Avx2) {
        detail::attn_scores_avx2(tile, scale, bf16);
        detail::attn_softmax_rows_avx2(tile, bf16);
        detail::attn_pv_avx2(tile);
      } else {
        detail::attn_scores_portable(tile, scale, bf16);
        detail::attn_softmax_rows_portable(tile, bf16);
        detail::attn_pv_portable(tile);
      }
      for (int r = 0; r < tile.rows; ++r) {
        if (stage) std::copy_n(tile.o[r], hd, out_rows[r]);
        if (bf16) round_to_dtype(out_rows[r], static_cast<size_t>(hd), act);
      }
    }
  }
}

}  // namespace olmo2::ops
