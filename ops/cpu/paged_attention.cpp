#include "ops/paged_attention.h"

#include "ops/cpu/kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace olmo2::ops {
namespace {

// q · k over n elements in a fixed order: 8 independent partial sums (lane i % 8), the
// tail folded into the same lanes, combined pairwise. No reassociation by the compiler
// (no -ffast-math), so the result depends only on the two vectors and n.
inline float dot_fixed(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// o += p · v over n elements; element-wise, so vectorising does not change any result.
inline void axpy(float p, const float* __restrict v, float* __restrict o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] += p * v[i];
}

// Rows of a KV pool, f32 or bf16. row() gives the f32 values of kv heads
// [kv0, kv1) of the row at element offset `at` (indexed by the whole row's columns): an f32
// pool's own memory, a bf16 pool's widened exactly into `scratch` (the pool's width), so a
// bf16 pool gives the bits of an f32 pool holding the same (bf16-rounded) values.
struct PoolRows {
  const void* data;
  bool bf16;
  explicit PoolRows(const TensorView& pool)
      : data(pool.dtype() == DType::BF16 ? pool.data() : pool.f32()), bf16(pool.dtype() == DType::BF16) {}
  const float* row(int64_t at, int64_t kv0, int64_t kv1, int64_t hd, float* scratch) const {
    if (!bf16) return static_cast<const float*>(data) + at;
    const uint16_t* src = static_cast<const uint16_t*>(data) + at;
    for (int64_t c = kv0 * hd; c < kv1 * hd; ++c) scratch[c] = bf16_to_f32(src[c]);
    return scratch;
  }
};

// One query row of one sequence.
struct RowItem {
  int32_t seq;
  int64_t t;
};

}  // namespace

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

  // Validate every sequence up front and flatten its rows into the work list.
  std::vector<RowItem> items;
  int64_t max_ctx = 0, work = 0;
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
    max_ctx = std::max(max_ctx, ctx);
    for (int64_t t = 0; t < seq.rows; ++t) {
      items.push_back({static_cast<int32_t>(s), t});
      work += std::min(seq.start + t + 1, window > 0 ? window : seq.start + t + 1) * hd * n_heads;
    }
  }
  if (items.empty()) return;

  const int group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // A work item is one row and a contiguous range of heads; the rows' heads are split
  // into just enough ranges to keep every thread busy. Grouping heads only lets one pass
  // over the cache serve several heads (each key row read once, contiguously); every
  // head's own sequence of fp32 operations is the same whatever the grouping, so the
  // result does not depend on it, nor on the batch, the schedule or the thread count.
  const int64_t n_rows = static_cast<int64_t>(items.size());
  const int64_t want = 4 * static_cast<int64_t>(omp_get_max_threads());
  const int64_t n_ranges = std::clamp<int64_t>((want + n_rows - 1) / n_rows, 1, n_heads);
  const int64_t n_items = n_rows * n_ranges;
  const float* qd = q.f32();
  // bf16 pools (docs/architecture.md §3.2) are read through PoolRows, widened exactly.
  const PoolRows kd(k_pool), vd(v_pool);
  float* od = out.f32();
  const int64_t q_ld = q.stride(0), k_ld = k_pool.stride(0), v_ld = v_pool.stride(0),
                o_ld = out.stride(0);

#pragma omp parallel if (work > 32768)
  {
    // scores[(h − h0)·max_ctx + j]: scaled scores, then probabilities, of head h.
    std::vector<float> scores(static_cast<size_t>(max_ctx * ((n_heads + n_ranges - 1) / n_ranges)));
    std::vector<float> mx(static_cast<size_t>(n_heads));
    std::vector<float> widened(static_cast<size_t>(k_pool.size(1)));  // a bf16 pool's row, as f32
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_items; ++i) {
      const RowItem& item = items[static_cast<size_t>(i / n_ranges)];
      const int64_t range = i % n_ranges;
      const int h0 = static_cast<int>(range * n_heads / n_ranges);
      const int h1 = static_cast<int>((range + 1) * n_heads / n_ranges);
      const PagedSequence& seq = sequences[static_cast<size_t>(item.seq)];
      const int64_t row = seq.row_begin + item.t;
      const int64_t visible = seq.start + item.t + 1;
      // The row's first key: keys before its window are skipped, which gives the bits of
      // the reference's masked scores (exp(−∞) = 0 adds nothing).
      const int64_t first = window > 0 ? std::max<int64_t>(0, visible - window) : 0;
      const float* qr = qd + row * q_ld;
      float* orow = od + row * o_ld;
      const int32_t* table = seq.block_table.data();
      auto pool_row = [&](int64_t j) {
        return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
      };
      auto sc = [&](int h) { return scores.data() + static_cast<size_t>((h - h0) * max_ctx); };

      // s_j = (q_h · k_j) / sqrt(hd), j increasing; running max per head.
      for (int h = h0; h < h1; ++h) mx[h] = -std::numeric_limits<float>::infinity();
      for (int64_t j = first; j < visible; ++j) {
        const float* kr = kd.row(pool_row(j) * k_ld, h0 / group, (h1 - 1) / group + 1, hd, widened.data());
        for (int h = h0; h < h1; ++h) {
          const float d = dot_fixed(qr + h * hd, kr + (h / group) * hd, hd);
          // bf16: the reference's q·kᵀ is a bf16 tensor, scaled into another one.
          const float x = act == DType::BF16 ? round_bf16(round_bf16(d) * scale) : d * scale;
          sc(h)[j] = x;
          mx[h] = std::max(mx[h], x);
        }
      }
      // p_j = exp(s_j − max) · (1 / Σ exp), the sum taken in increasing j.
      for (int h = h0; h < h1; ++h) {
        float* s = sc(h);
        float sum = 0.0f;
        for (int64_t j = first; j < visible; ++j) {
          s[j] = std::exp(s[j] - mx[h]);
          sum += s[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = first; j < visible; ++j) {
          s[j] *= inv;
          if (act == DType::BF16) s[j] = round_bf16(s[j]);
        }
      }
      // out_h = Σ_j p_j v_j, j increasing.
      std::fill(orow + h0 * hd, orow + h1 * hd, 0.0f);
      for (int64_t j = first; j < visible; ++j) {
        const float* vr = vd.row(pool_row(j) * v_ld, h0 / group, (h1 - 1) / group + 1, hd, widened.data());
        for (int h = h0; h < h1; ++h) axpy(sc(h)[j], vr + (h / group) * hd, orow + h * hd, hd);
      }
      if (act == DType::BF16)
        round_to_dtype(orow + h0 * hd, static_cast<size_t>((h1 - h0) * hd), act);
    }
  }
}

}  // namespace olmo2::ops
