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

using ring_parts::Pass;
using ring_parts::RunPair;
using ring_parts::SoftmaxState;

constexpr int kTagKV = 7101;  // the K/V blocks of the forward on the CP group

/// Merges one row's scores x[a, b) into (m, l); with `acc` (Online) rescales the output
/// row (hd floats) by exp(m − m') and leaves exp(x − m') in x.
void merge_row(float* x, int64_t a, int64_t b, float& m, float& l, float* acc, int64_t hd) {
  float mx = m;
  for (int64_t c = a; c < b; ++c) mx = std::max(mx, x[c]);
  const float alpha = std::exp(m - mx);  // 0 while m is −∞ (no key seen yet)
  float sum = 0.0f;
  for (int64_t c = a; c < b; ++c) {
    const float e = std::exp(x[c] - mx);
    if (acc) x[c] = e;
    sum += e;
  }
  l = l * alpha + sum;
  if (acc && alpha != 1.0f) {
    for (int64_t i = 0; i < hd; ++i) acc[i] *= alpha;
  }
  m = mx;
}

/// One query head against one block (attend_block's body).
void attend_head(Pass pass, const ring_parts::Heads& hs, const std::vector<RunPair>& pairs, const TensorView& q,
                 const float* kb, const float* vb, int64_t kvw, int h, SoftmaxState& st, const TensorView& out,
                 std::vector<float>& tile) {
  const int64_t hd = hs.hd;
  const int kvh = h / (hs.n_heads / hs.n_kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (const RunPair& pr : pairs) {
    for (int64_t r0 = 0; r0 < pr.q.len; r0 += ring_parts::kQueryTile) {
      const int64_t nb = std::min(ring_parts::kQueryTile, pr.q.len - r0), p0 = pr.q.pos + r0;
      int64_t lo, hi, lo_last, hi_last;
      ring_parts::key_range(pr.k, p0, hs.window, lo, hi);
      ring_parts::key_range(pr.k, p0 + nb - 1, hs.window, lo_last, hi_last);
      hi = hi_last;  // the tile's keys: the first query's first to the last query's last
      if (lo >= hi) continue;
      const int64_t nc = hi - lo, row0 = pr.q.row + r0;
      tile.resize(static_cast<size_t>(nb * nc));
      ring_parts::sgemm(false, true, nb, nc, hd, q.f32() + row0 * q.stride(0) + h * hd, q.stride(0),
                        kb + (pr.k.row + lo) * kvw + kvh * hd, kvw, 0.0f, tile.data(), nc);
      for (int64_t i = 0; i < nb; ++i) {
        float* x = tile.data() + i * nc;
        int64_t a, b;
        ring_parts::key_range(pr.k, p0 + i, hs.window, a, b);
        a = std::min(std::max(a, lo), hi) - lo, b = std::max(std::min(b, hi) - lo, a);  // within [0, nc]
        const size_t s = static_cast<size_t>((row0 + i) * hs.n_heads + h);
        std::fill(x, x + a, 0.0f), std::fill(x + b, x + nc, 0.0f);
        if (a == b) continue;  // this query sees none of the tile's keys
        if (hs.round && pass == Pass::Stats) {  // the f32 scores' statistics, for lse
          float mx = st.m32[s], sum = 0.0f;
          for (int64_t c = a; c < b; ++c) mx = std::max(mx, x[c] * scale);
          for (int64_t c = a; c < b; ++c) sum += std::exp(x[c] * scale - mx);
          st.l32[s] = st.l32[s] * std::exp(st.m32[s] - mx) + sum, st.m32[s] = mx;
        }
        for (int64_t c = a; c < b; ++c) {
          // bf16: the reference's q·kᵀ is a bf16 tensor, scaled into another one.
          x[c] = hs.round ? round_bf16(round_bf16(x[c]) * scale) : x[c] * scale;
        }
        if (pass == Pass::Normalised) {
          const float m = st.m[s], inv = 1.0f / st.l[s];
          for (int64_t c = a; c < b; ++c) {
            x[c] = std::exp(x[c] - m) * inv;
            if (hs.round) x[c] = round_bf16(x[c]);
          }
        } else {
          float* acc = pass == Pass::Online ? out.f32() + (row0 + i) * out.stride(0) + h * hd : nullptr;
          merge_row(x, a, b, st.m[s], st.l[s], acc, hd);
        }
      }
      if (pass == Pass::Stats) continue;
      // out += P · V over the tile's keys
      ring_parts::sgemm(false, false, nb, hd, nc, tile.data(), nc, vb + (pr.k.row + lo) * kvw + kvh * hd, kvw, 1.0f,
                        out.f32() + row0 * out.stride(0) + h * hd, out.stride(0));
    }
  }
}

}  // namespace

void ring_parts::attend_block(Pass pass, const Heads& hs, const std::vector<RunPair>& pairs, const TensorView& q,
                              const float* kb, const float* vb, int64_t kvw, SoftmaxState& st, const TensorView& out) {
  // One query head per OpenMP thread: heads write disjoint columns and states.
#pragma omp parallel if (hs.n_heads > 1 && q.size(0) * q.size(0) > 4096)
  {
    std::vector<float> tile;
#pragma omp for schedule(static)
    for (int h = 0; h < hs.n_heads; ++h) attend_head(pass, hs, pairs, q, kb, vb, kvw, h, st, out, tile);
  }
}

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
  const bool bf16 = act == DType::BF16;
  const size_t states = static_cast<size_t>(rows * n_heads);
  SoftmaxState st{std::vector<float>(states, -std::numeric_limits<float>::infinity()), std::vector<float>(states, 0.0f),
                  {}, {}};
  if (bf16) st.m32 = st.m, st.l32 = st.l;
  for (int64_t r = 0; r < rows; ++r) std::fill_n(out.f32() + r * out.stride(0), n_heads * hd, 0.0f);
  // The block in hand: K rows then V rows, one message.
  std::vector<float> block(static_cast<size_t>(2 * rows * kvw)), spare;
  auto own_block = [&] {
    ring_parts::pack_rows(k, block.data());
    ring_parts::pack_rows(v, block.data() + rows * kvw);
  };
  const ring_parts::Heads hs{n_heads, n_kv_heads, hd, window, bf16};
  auto pass = [&](Pass kind) {
    ring_parts::ring_pass(cp, shard, window, block, static_cast<int64_t>(block.size()), kTagKV, spare,
                          [&](const std::vector<RunPair>& pairs) {
                            ring_parts::attend_block(kind, hs, pairs, q, block.data(), block.data() + rows * kvw, kvw,
                                                     st, out);
                          });
  };
  own_block();
  if (!bf16) {
    pass(Pass::Online);
  } else {
    // The reference rounds the normalised probabilities: their max and sum first, then
    // the probabilities, over the ring twice.
    pass(Pass::Stats);
    own_block();
    pass(Pass::Normalised);
  }
  const std::vector<float>& m = bf16 ? st.m32 : st.m;
  const std::vector<float>& l = bf16 ? st.l32 : st.l;
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out.f32() + r * out.stride(0);
    for (int h = 0; h < n_heads; ++h) {
      const size_t s = static_cast<size_t>(r * n_heads + h);
      if (!bf16) {
        const float inv = 1.0f / l[s];
        for (int64_t i = 0; i < hd; ++i) o[h * hd + i] *= inv;
      }
      lse.f32()[s] = m[s] + std::log(l[s]);
    }
    if (bf16) round_to_dtype(o, static_cast<size_t>(n_heads * hd), act);
  }
}

}  // namespace olmo2
