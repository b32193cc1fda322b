// Ring attention's forward (runtime/model/ring_attention.h): per hop the queries of this
// rank against the K/V block in hand, merged into the running max, sum and output of an
// online softmax, then the block passed on (docs/architecture.md §7 "Context parallelism:
// ring attention").
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/dtype.h"
#include "runtime/model/ring_attention.h"
#include "runtime/model/ring_attention_parts.h"

namespace olmo2 {
namespace {

using ring_parts::kQueryTile;
using ring_parts::Run;
using ring_parts::RunPair;

constexpr int kTagKV = 7101;  // the K/V blocks of the forward on the CP group

/// Online-softmax state of one (query row, head): m is the running max, l the running sum
/// of exp(score − m) (FlashAttention's m and ℓ). m32/l32: the same over the f32 scores,
/// kept apart only when bf16 rounds the scores the output is built from.
struct SoftmaxState {
  std::vector<float> m, l, m32, l32;
};

/// Merges one row's scores x[a, b) (the others of the tile row zeroed) into (m, l) and the
/// output row `acc` (hd floats); leaves exp(x − m_new) in x.
void merge_row(float* x, int64_t a, int64_t b, int64_t width, float& m, float& l, float* acc, int64_t hd) {
  float mx = m;
  for (int64_t c = a; c < b; ++c) mx = std::max(mx, x[c]);
  const float alpha = std::exp(m - mx);  // 0 while m is −∞ (no key seen yet)
  float sum = 0.0f;
  for (int64_t c = a; c < b; ++c) {
    x[c] = std::exp(x[c] - mx);
    sum += x[c];
  }
  std::fill(x, x + a, 0.0f);
  std::fill(x + b, x + width, 0.0f);
  l = l * alpha + sum;
  if (alpha != 1.0f) {
    for (int64_t i = 0; i < hd; ++i) acc[i] *= alpha;
  }
  m = mx;
}

/// The log-sum-exp statistics of the f32 scaled scores x[a, b)·scale alone (bf16 forward).
void merge_stats(const float* x, int64_t a, int64_t b, float scale, float& m, float& l) {
  float mx = m;
  for (int64_t c = a; c < b; ++c) mx = std::max(mx, x[c] * scale);
  float sum = 0.0f;
  for (int64_t c = a; c < b; ++c) sum += std::exp(x[c] * scale - mx);
  l = l * std::exp(m - mx) + sum;
  m = mx;
}

/// Query head h of this rank's rows against one K/V block (kb, vb: [rows, KV·hd] dense).
void attend_head(const std::vector<RunPair>& pairs, const TensorView& q, const float* kb, const float* vb,
                 int64_t kvw, int h, int kvh, int64_t hd, int n_heads, int64_t window, DType act, float scale,
                 const TensorView& out, SoftmaxState& st, std::vector<float>& tile) {
  const bool bf16 = act == DType::BF16;
  for (const RunPair& pr : pairs) {
    for (int64_t r0 = 0; r0 < pr.q.len; r0 += kQueryTile) {
      const int64_t nb = std::min(kQueryTile, pr.q.len - r0), p0 = pr.q.pos + r0;
      int64_t lo, hi, lo_last, hi_last;
      ring_parts::key_range(pr.k, p0, window, lo, hi);
      ring_parts::key_range(pr.k, p0 + nb - 1, window, lo_last, hi_last);
      hi = hi_last;  // the tile's keys: the first query's first to the last query's last
      if (lo >= hi) continue;
      const int64_t nc = hi - lo, row0 = pr.q.row + r0;
      tile.resize(static_cast<size_t>(nb * nc));
      ring_parts::sgemm(false, true, nb, nc, hd, q.f32() + row0 * q.stride(0) + h * hd, q.stride(0),
                        kb + (pr.k.row + lo) * kvw + kvh * hd, kvw, 0.0f, tile.data(), nc);
      for (int64_t i = 0; i < nb; ++i) {
        float* x = tile.data() + i * nc;
        int64_t a, b;
        ring_parts::key_range(pr.k, p0 + i, window, a, b);
        a = std::max(a, lo) - lo, b = std::min(b, hi) - lo;
        const size_t s = static_cast<size_t>((row0 + i) * n_heads + h);
        float* acc = out.f32() + (row0 + i) * out.stride(0) + h * hd;
        if (a >= b) {  // this query sees none of the tile's keys
          std::fill(x, x + nc, 0.0f);
          continue;
        }
        if (bf16) {
          merge_stats(x, a, b, scale, st.m32[s], st.l32[s]);
          // The reference's q·kᵀ is a bf16 tensor, scaled into another one.
          for (int64_t c = a; c < b; ++c) x[c] = round_bf16(round_bf16(x[c]) * scale);
        } else {
          for (int64_t c = a; c < b; ++c) x[c] *= scale;
        }
        merge_row(x, a, b, nc, st.m[s], st.l[s], acc, hd);
      }
      // acc += P · V over the tile's keys
      ring_parts::sgemm(false, false, nb, hd, nc, tile.data(), nc, vb + (pr.k.row + lo) * kvw + kvh * hd, kvw, 1.0f,
                        out.f32() + row0 * out.stride(0) + h * hd, out.stride(0));
    }
  }
}

}  // namespace

void ring_attention_forward(parallel::Communicator& cp, const ContextShard& shard, const TensorView& q,
                            const TensorView& k, const TensorView& v, int n_heads, int n_kv_heads,
                            int64_t window, DType act, const TensorView& out, const TensorView& lse) {
  const char* op = "ring_attention_forward";
  const int64_t hd = ring_parts::check_shapes(op, cp, shard, q, k, v, n_heads, n_kv_heads, window);
  const int64_t rows = q.size(0), kvw = k.size(1);
  OLMO2_CHECK(out.shape() == q.shape() && out.dtype() == DType::F32 && out.stride(1) == 1, op, ": out ",
              out.shape_str(), " for q ", q.shape_str());
  OLMO2_CHECK(lse.shape() == std::vector<int64_t>({rows, n_heads}) && lse.dtype() == DType::F32 && lse.is_contiguous(),
              op, ": lse ", lse.shape_str(), " must be [", rows, ", ", n_heads, "] f32 dense");
  const int p = shard.cp, j = cp.rank(), group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool bf16 = act == DType::BF16;
  const size_t states = static_cast<size_t>(rows * n_heads);
  SoftmaxState st{std::vector<float>(states, -std::numeric_limits<float>::infinity()), std::vector<float>(states, 0.0f),
                  {}, {}};
  if (bf16) st.m32 = st.m, st.l32 = st.l;
  for (int64_t r = 0; r < rows; ++r) std::fill_n(out.f32() + r * out.stride(0), n_heads * hd, 0.0f);
  const std::vector<Run> q_runs = ring_parts::runs_of(shard, j);
  // The block in hand: K rows then V rows, one message.
  std::vector<float> block(static_cast<size_t>(2 * rows * kvw)), spare;
  ring_parts::pack_rows(k, block.data());
  ring_parts::pack_rows(v, block.data() + rows * kvw);
  for (int hop = 0; hop < p; ++hop) {
    const int src = (j - hop + p) % p;
    const std::vector<RunPair> pairs =
        ring_parts::computed_pairs(q_runs, ring_parts::runs_of(shard, src), window);
    if (!pairs.empty()) {
      const float* kb = block.data();
      const float* vb = block.data() + rows * kvw;
#pragma omp parallel if (n_heads > 1 && rows * rows > 4096)
      {
        std::vector<float> tile;
#pragma omp for schedule(static)
        for (int h = 0; h < n_heads; ++h) {
          attend_head(pairs, q, kb, vb, kvw, h, h / group, hd, n_heads, window, act, scale, out, st, tile);
        }
      }
    }
    if (hop + 1 < p) {
      ring_parts::ring_shift(cp, block.data(), static_cast<int64_t>(block.size()), kTagKV, spare);
    }
  }
  const std::vector<float>& m = bf16 ? st.m32 : st.m;
  const std::vector<float>& l = bf16 ? st.l32 : st.l;
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out.f32() + r * out.stride(0);
    for (int h = 0; h < n_heads; ++h) {
      const size_t s = static_cast<size_t>(r * n_heads + h);
      const float inv = 1.0f / st.l[s];
      for (int64_t i = 0; i < hd; ++i) o[h * hd + i] *= inv;
      lse.f32()[s] = m[s] + std::log(l[s]);
    }
    if (bf16) round_to_dtype(o, static_cast<size_t>(n_heads * hd), act);
  }
}

}  // namespace olmo2
