// Ring attention's backward (runtime/model/ring_attention.h): FlashAttention-2's backward
// per K/V block, the block's dK/dV partial sums travelling around the ring with it and
// brought back to their owner by one last hop (docs/architecture.md §7 "Context
// parallelism: ring attention").
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "runtime/model/ring_attention.h"
#include "runtime/model/ring_attention_parts.h"

namespace olmo2 {
namespace {

using ring_parts::kQueryTile;
using ring_parts::RunPair;

constexpr int kTagKVGrad = 7102;  // K, V, dK, dV of the backward on the CP group
constexpr int kTagHome = 7103;    // the dK/dV sums' last hop to their owner
constexpr int kTagKV32 = 7104;    // K, V of the bf16 backward's f32 output pass

/// This rank's inputs and per-(row, head) statistics, shared by every block.
struct Queries {
  const TensorView &q, &dout, &dq;
  const float* lse;  // [rows, H]
  const float* d;    // D = rowsum(dout ∘ out), [rows, H]
  int n_heads;
  int64_t hd, window;
  float scale;
};

/// Query head h against one block: block = [K | V | dK | dV], each [rows, KV·hd] dense.
void block_backward_head(const Queries& in, const std::vector<RunPair>& pairs, float* block, int64_t rows,
                         int64_t kvw, int h, int kvh, std::vector<float>& p, std::vector<float>& ds) {
  const int64_t hd = in.hd;
  const float* kb = block;
  const float* vb = block + rows * kvw;
  float* dkb = block + 2 * rows * kvw;
  float* dvb = block + 3 * rows * kvw;
  for (const RunPair& pr : pairs) {
    for (int64_t r0 = 0; r0 < pr.q.len; r0 += kQueryTile) {
      const int64_t nb = std::min(kQueryTile, pr.q.len - r0), p0 = pr.q.pos + r0;
      int64_t lo, hi, lo_last, hi_last;
      ring_parts::key_range(pr.k, p0, in.window, lo, hi);
      ring_parts::key_range(pr.k, p0 + nb - 1, in.window, lo_last, hi_last);
      hi = hi_last;
      if (lo >= hi) continue;
      const int64_t nc = hi - lo, row0 = pr.q.row + r0, key0 = pr.k.row + lo;
      p.resize(static_cast<size_t>(nb * nc));
      ds.resize(static_cast<size_t>(nb * nc));
      const float* qh = in.q.f32() + row0 * in.q.stride(0) + h * hd;
      const float* doh = in.dout.f32() + row0 * in.dout.stride(0) + h * hd;
      // S = q·kᵀ (scaled below), dP = dout·vᵀ
      ring_parts::sgemm(false, true, nb, nc, hd, qh, in.q.stride(0), kb + key0 * kvw + kvh * hd, kvw, 0.0f, p.data(),
                        nc);
      ring_parts::sgemm(false, true, nb, nc, hd, doh, in.dout.stride(0), vb + key0 * kvw + kvh * hd, kvw, 0.0f,
                        ds.data(), nc);
      for (int64_t i = 0; i < nb; ++i) {
        float* pr_row = p.data() + i * nc;
        float* ds_row = ds.data() + i * nc;
        int64_t a, b;
        ring_parts::key_range(pr.k, p0 + i, in.window, a, b);
        a = std::min(std::max(a, lo), hi) - lo, b = std::max(std::min(b, hi) - lo, a);  // within [0, nc]
        const size_t s = static_cast<size_t>((row0 + i) * in.n_heads + h);
        const float lse = in.lse[s], d = in.d[s];
        for (int64_t c = a; c < b; ++c) {
          pr_row[c] = std::exp(pr_row[c] * in.scale - lse);
          ds_row[c] = pr_row[c] * (ds_row[c] - d) * in.scale;  // dS, already times the score scale
        }
        std::fill(pr_row, pr_row + a, 0.0f), std::fill(ds_row, ds_row + a, 0.0f);
        std::fill(pr_row + b, pr_row + nc, 0.0f), std::fill(ds_row + b, ds_row + nc, 0.0f);
      }
      // dq += dS·K, dK_block += dSᵀ·Q, dV_block += Pᵀ·dout
      ring_parts::sgemm(false, false, nb, hd, nc, ds.data(), nc, kb + key0 * kvw + kvh * hd, kvw, 1.0f,
                        in.dq.f32() + row0 * in.dq.stride(0) + h * hd, in.dq.stride(0));
      ring_parts::sgemm(true, false, nc, hd, nb, ds.data(), nc, qh, in.q.stride(0), 1.0f, dkb + key0 * kvw + kvh * hd,
                        kvw);
      ring_parts::sgemm(true, false, nc, hd, nb, p.data(), nc, doh, in.dout.stride(0), 1.0f,
                        dvb + key0 * kvw + kvh * hd, kvw);
    }
  }
}

}  // namespace

void ring_attention_backward(parallel::Communicator& cp, const ContextShard& shard, const TensorView& q,
                             const TensorView& k, const TensorView& v, const TensorView& out,
                             const TensorView& lse, const TensorView& dout, int n_heads, int n_kv_heads,
                             int64_t window, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                             DType act) {
  const char* op = "ring_attention_backward";
  const int64_t hd = ring_parts::check_shapes(op, cp, shard, q, k, v, n_heads, n_kv_heads, window);
  const int64_t rows = q.size(0), kvw = k.size(1);
  for (const TensorView* t : {&out, &dout, &dq}) {
    OLMO2_CHECK(t->shape() == q.shape() && t->dtype() == DType::F32 && t->stride(1) == 1, op, ": out, dout, dq ",
                t->shape_str(), " must be f32 like q ", q.shape_str());
  }
  for (const TensorView* t : {&dk, &dv}) {
    OLMO2_CHECK(t->shape() == k.shape() && t->dtype() == DType::F32 && t->stride(1) == 1, op, ": dk, dv ",
                t->shape_str(), " must be f32 like k ", k.shape_str());
  }
  OLMO2_CHECK(lse.shape() == std::vector<int64_t>({rows, n_heads}) && lse.dtype() == DType::F32 && lse.is_contiguous(),
              op, ": lse ", lse.shape_str(), " must be [", rows, ", ", n_heads, "] f32 dense");
  const int p = shard.cp, group = n_heads / n_kv_heads;
  const int64_t part = rows * kvw;  // one of K, V, dK, dV
  std::vector<float> block(static_cast<size_t>(4 * part), 0.0f), spare;
  auto own_block = [&] {
    ring_parts::pack_rows(k, block.data());
    ring_parts::pack_rows(v, block.data() + part);
  };
  own_block();
  // D = rowsum(dout ∘ o), o the output the f32 probabilities give: `out` itself in f32;
  // after a bf16 forward the f32 attention Σ exp(s − lse)·v, one pass over the ring, as
  // ops::causal_attention_backward's Σ P·dP.
  Tensor out32;
  const TensorView* o_view = &out;
  if (act == DType::BF16) {
    out32 = Tensor::zeros({rows, n_heads * hd});
    ring_parts::SoftmaxState st{std::vector<float>(lse.f32(), lse.f32() + rows * n_heads),
                                std::vector<float>(static_cast<size_t>(rows * n_heads), 1.0f), {}, {}};
    const ring_parts::Heads hs{n_heads, n_kv_heads, hd, window, false};
    ring_parts::ring_pass(cp, shard, window, block, 2 * part, kTagKV32, spare, [&](const std::vector<RunPair>& pairs) {
      ring_parts::attend_block(ring_parts::Pass::Normalised, hs, pairs, q, block.data(), block.data() + part, kvw, st,
                               out32.view());
    });
    own_block();
    o_view = &out32.view();
  }
  std::vector<float> d(static_cast<size_t>(rows * n_heads));
  for (int64_t r = 0; r < rows; ++r) {
    const float* o = o_view->f32() + r * o_view->stride(0);
    const float* g = dout.f32() + r * dout.stride(0);
    for (int h = 0; h < n_heads; ++h) {
      float sum = 0.0f;
      for (int64_t i = h * hd; i < (h + 1) * hd; ++i) sum += o[i] * g[i];
      d[static_cast<size_t>(r * n_heads + h)] = sum;
    }
    std::fill_n(dq.f32() + r * dq.stride(0), n_heads * hd, 0.0f);
  }
  const Queries in{q, dout, dq, lse.f32(), d.data(), n_heads, hd, window, 1.0f / std::sqrt(static_cast<float>(hd))};
  ring_parts::ring_pass(cp, shard, window, block, 4 * part, kTagKVGrad, spare, [&](const std::vector<RunPair>& pairs) {
    // One kv head per thread: its query heads add into the same dK/dV columns.
#pragma omp parallel if (n_kv_heads > 1 && rows * rows > 4096)
    {
      std::vector<float> pt, dst;
#pragma omp for schedule(static)
      for (int kvh = 0; kvh < n_kv_heads; ++kvh) {
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
          block_backward_head(in, pairs, block.data(), rows, kvw, h, kvh, pt, dst);
        }
      }
    }
  });
  // In hand: rank j+1's block; its dK/dV go one hop on, rank j's arrive from j−1.
  if (p > 1) ring_parts::ring_shift(cp, block.data() + 2 * part, 2 * part, kTagHome, spare);
  ring_parts::unpack_rows(block.data() + 2 * part, dk);
  ring_parts::unpack_rows(block.data() + 3 * part, dv);
}

}  // namespace olmo2
