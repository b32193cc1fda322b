// The forward of one OLMo 2 decoder layer (runtime/model/decoder_layer.h).
#include "runtime/model/decoder_layer.h"
#include "runtime/model/decoder_layer_parts.h"

#include <algorithm>

#include "ops/attention.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/paged_attention.h"
#include "ops/quantized_linear.h"
#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"

namespace olmo2 {

KVCacheBinding bind_kv_cache(const KVCache& cache, const PackedTokens& packed,
                             const std::vector<std::span<const int32_t>>& block_tables) {
  OLMO2_CHECK(block_tables.size() == packed.sequences(), packed.sequences(), " sequences with ", block_tables.size(),
              " block tables");
  KVCacheBinding kv;
  kv.cache = &cache;
  const int64_t groups = cache.layout().groups();
  kv.block_tables.resize(static_cast<size_t>(groups));
  kv.rows.resize(static_cast<size_t>(groups));
  kv.contiguous.resize(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    const size_t k = static_cast<size_t>(g);
    for (size_t i = 0; i < packed.sequences(); ++i) {
      const int64_t n = packed.offset[i + 1] - packed.offset[i];
      const std::span<const int32_t> table = KVCache::group_table(block_tables[i], groups, g);
      kv.block_tables[k].push_back(table);
      kv.rows[k].push_back(cache.rows_of(table, packed.start[i], n));
      kv.contiguous[k].push_back(cache.contiguous_rows(table, packed.start[i] + n));
    }
  }
  return kv;
}

namespace {

using layer_parts::copy_of;
using layer_parts::sized;

/// Rows of a KV-cache pool as f32 (`view`): the pool's own memory when f32, else (bf16
/// pools) widened exactly into `owned` on its device.
struct F32Rows {
  Tensor owned;
  TensorView view;
};
F32Rows f32_rows(const TensorView& rows) {
  if (rows.dtype() == DType::F32) return {Tensor{}, rows};
  F32Rows r{Tensor::zeros({rows.size(0), rows.size(1)}, DType::F32, rows.device()), {}};
  ops::copy(rows, r.owned.view());
  r.view = r.owned.view();
  return r;
}

/// Hands the attention of each sequence whose probabilities the tap reads to it: its
/// queries and the keys its window sees, from its own rows (no cache) or gathered from the cache
/// (after this layer wrote its new keys there).
void tap_attention(const LayerContext& ctx, int64_t layer, const PackedTokens& packed, const KVCacheBinding* kv,
                   const TapRows& where, const TensorView& q, const TensorView& k, ForwardTap& tap) {
  const int64_t global = ctx.shard.global_layer(layer);
  const int64_t window = ctx.config.attention_window(global);
  for (size_t i = 0; i < packed.sequences(); ++i) {
    if (!tap.wants_attention(global, i)) continue;  // the other sequences of the batch: no gather
    const int64_t n = packed.offset[i + 1] - packed.offset[i], start = packed.start[i];
    if (!kv) {
      tap.attention(global, where, i, packed.rows_of(q, i), packed.rows_of(k, i), 0, window);
      continue;
    }
    const KVCache& cache = *kv->cache;
    const size_t group = static_cast<size_t>(cache.group(layer));
    const int64_t first = window > 0 ? std::max<int64_t>(0, start - window + 1) : 0, m = start + n - first;
    const Tensor index = cache.rows_of(kv->block_tables[group][i], first, m);
    Tensor gathered = Tensor::zeros({m, cache.keys(layer).size(1)}, cache.dtype(), q.device());
    ops::gather_rows(cache.keys(layer), index.view(), gathered.view());
    const F32Rows keys = f32_rows(gathered.view());
    tap.attention(global, where, i, packed.rows_of(q, i), keys.view, first, window);
  }
}

/// The largest attention logit of sequence i's rows (no cache). Under context parallelism
/// a rank's rows of a sequence are two chunks of consecutive positions (the zigzag split):
/// the maximum over each chunk's causal pairs, a lower bound of the whole sequence's that
/// the trainer takes the maximum of over the CP group (docs/architecture.md §7 "Context
/// parallelism").
float own_rows_max_logit(const LayerContext& ctx, const PackedTokens& packed, size_t i, const TensorView& q,
                         const TensorView& k, int nh, int nkv, int64_t window) {
  const TensorView qi = packed.rows_of(q, i), ki = packed.rows_of(k, i);
  if (!ctx.cp) return ops::causal_attention_max_logit(qi, ki, nh, nkv, window);
  const int64_t half = qi.size(0) / 2;
  return std::max(ops::causal_attention_max_logit(qi.rows(0, half), ki.rows(0, half), nh, nkv, window),
                  ops::causal_attention_max_logit(qi.rows(half, qi.size(0)), ki.rows(half, ki.size(0)), nh, nkv,
                                                  window));
}

/// Attention of every sequence's new rows into `out`, writing the new keys and values
/// into the cache first when there is one. `lse`: ring attention's log-sum-exp under
/// context parallelism (empty otherwise).
void attend(const LayerContext& ctx, int64_t layer, const PackedTokens& packed, const KVCacheBinding* kv,
            const LayerOptions& options, const TensorView& q, const TensorView& k, const TensorView& v,
            const TensorView& out, const TensorView& lse, LayerStats* stats) {
  const int nh = static_cast<int>(ctx.shard.q_heads.size()), nkv = static_cast<int>(ctx.shard.kv_heads.size());
  const DType act = options.activations;
  const int64_t window = ctx.config.attention_window(ctx.shard.global_layer(layer));
  const size_t nseq = packed.sequences();
  if (!kv) {  // each sequence attends to its own new tokens only
    layer_parts::attend_own_rows(ctx, ctx.shard.global_layer(layer), packed, act, q, k, v, out, lse);
    for (size_t i = 0; stats && i < nseq; ++i) {
      stats->attention_logit_max =
          std::max(stats->attention_logit_max, own_rows_max_logit(ctx, packed, i, q, k, nh, nkv, window));
    }
    return;
  }
  // The layer's KV group: its tables and its slot's pools (docs/architecture.md §8).
  const KVCache& cache = *kv->cache;
  const size_t group = static_cast<size_t>(cache.group(layer));
  const std::vector<std::span<const int32_t>>& tables = kv->block_tables[group];
  for (size_t i = 0; i < nseq; ++i) {
    cache.write(layer, kv->rows[group][i].view(), packed.rows_of(k, i), packed.rows_of(v, i));
  }
  std::vector<ops::PagedSequence> paged;
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t n = packed.offset[i + 1] - packed.offset[i], first = kv->contiguous[group][i];
    if (!options.batch_invariant && first >= 0) {  // consecutive blocks: one BLAS attention over the rows
      const int64_t end = first + packed.start[i] + n;
      // bf16 pools (docs/architecture.md §3.2): the rows widened exactly to f32 first.
      const F32Rows keys = f32_rows(cache.keys(layer).rows(first, end));
      const F32Rows values = f32_rows(cache.values(layer).rows(first, end));
      ops::causal_attention(packed.rows_of(q, i), keys.view, values.view, nh, nkv, packed.rows_of(out, i), act,
                            window);
    } else {
      paged.push_back({packed.offset[i], n, packed.start[i], tables[i]});
    }
  }
  if (!paged.empty()) {
    ops::paged_attention(q, cache.keys(layer), cache.values(layer), cache.block_size(), paged, nh, nkv, out, act,
                         window);
  }
}

}  // namespace

namespace {
/// Whether a forward under `mode` keeps activation `member` for the backward
/// (LayerOptions::recompute; docs/architecture.md §7 "Recomputation").
bool keeps(Recompute mode, Tensor LayerActivations::*member) {
  switch (mode) {
    case Recompute::None:
      return true;
    case Recompute::Selective:
      return member != &LayerActivations::qr && member != &LayerActivations::kr &&
             member != &LayerActivations::attn && member != &LayerActivations::lse && member != &LayerActivations::x1;
    case Recompute::Full:
      return member == &LayerActivations::x;
  }
  return true;
}
}  // namespace

void decoder_layer_forward(const LayerContext& ctx, const LayerWeights& w, int64_t layer, const PackedTokens& packed,
                           const KVCacheBinding* kv, const LayerOptions& options, const TensorView& x,
                           LayerWorkspace& ws, LayerActivations* saved, LayerStats* stats) {
  const ModelConfig& c = ctx.config;
  const ShardSpec& sh = ctx.shard;
  OLMO2_CHECK(!(saved && kv), "a layer forward keeps activations for a backward only without a KV cache");
  if (options.tap && options.recompute != Recompute::None) {
    OLMO2_THROW(InputError, "a forward tap cannot be combined with recomputation (", recompute_name(options.recompute),
                "): a recomputed layer would not see the tap's changes");
  }
  const int64_t n = packed.rows(), h = c.hidden_size, hd = c.head_dim;
  OLMO2_CHECK(x.shape() == std::vector<int64_t>({n, h}), "layer input ", x.shape_str(), " for ", n, " tokens of width ",
              h);
  const int nh = static_cast<int>(sh.q_heads.size()), nkv = static_cast<int>(sh.kv_heads.size());
  const int64_t qw = nh * hd, kvw = nkv * hd, inter = sh.mlp_rows.size();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const DType act = options.activations;
  const auto dense_linear = options.batch_invariant ? ops::linear_batch_invariant : ops::linear;
  // A weight quantized at load goes through the quantized product (batch-invariant on
  // every path, for serving and generation alike: docs/architecture.md §3.2 "Quantized
  // weights"); activations stay f32, rounded where they are today.
  auto linear = [&](const TensorView& in, const Tensor& dense, const ops::QuantizedWeight& quantized,
                    const TensorView& out) {
    if (!quantized.empty()) {
      ops::linear_quantized(in, quantized, out);
    } else {
      dense_linear(in, dense.view(), out);
    }
  };
  const QuantizedLinears& wq = w.quantized;
  auto round = [&](const TensorView& t) { layer_parts::round_to_activation(t, act); };
  auto reduce = [&](const TensorView& t) {  // the partial sums of a row-parallel product
    if (ctx.tp) parallel::all_reduce_sum(*ctx.tp, t);
  };
  // A tensor the backward keeps (those of the recompute mode), or a reused scratch one;
  // activations and scratch live on the device of the residual stream.
  const Device dev = x.device();
  auto buffer = [&](Tensor LayerActivations::*member, Tensor& scratch, int64_t cols) {
    if (!saved || !keeps(options.recompute, member)) return sized(scratch, n, cols, dev);
    saved->*member = Tensor::zeros({n, cols}, DType::F32, dev);
    return (saved->*member).view();
  };
  if (saved) {
    saved->x = copy_of(x), saved->act = act, saved->layer = sh.global_layer(layer);
    saved->recompute = options.recompute, saved->batch_invariant = options.batch_invariant;
  }
  // Named activations (docs/architecture.md §13): each site is handed to the tap, which
  // may change it in place; without a tap nothing below differs.
  ForwardTap* const tap = options.tap;
  const int64_t global = sh.global_layer(layer);
  const TapRows where = tap ? TapRows{packed.offset, packed.start} : TapRows{};
  auto site = [&](TapSite s, const TensorView& t) {
    if (tap && tap->wants(s, global)) tap->at(s, global, where, t);
  };
  site(TapSite::LayerInput, x);

  // ---- attention block ----
  const TensorView q0 = buffer(&LayerActivations::q0, ws.q, qw), k0 = buffer(&LayerActivations::k0, ws.k, kvw);
  const TensorView v = buffer(&LayerActivations::v, ws.v, kvw);
  linear(x, w.q_proj, wq.q_proj, q0);
  linear(x, w.k_proj, wq.k_proj, k0);
  linear(x, w.v_proj, wq.v_proj, v);
  round(q0), round(k0), round(v);
  // QK-norm over the whole projections; kept apart from q0/k0 only for a backward.
  const TensorView q = saved ? buffer(&LayerActivations::qr, ws.qr, qw) : q0;
  const TensorView k = saved ? buffer(&LayerActivations::kr, ws.kr, kvw) : k0;
  layer_parts::qk_norm_rope(ctx, w, global, packed, act, q0, k0, q, k);
  site(TapSite::AttentionQueries, q), site(TapSite::AttentionKeys, k), site(TapSite::AttentionValues, v);
  const TensorView attn = buffer(&LayerActivations::attn, ws.attn, qw);
  OLMO2_CHECK(!(ctx.cp && kv), "context parallelism runs without a KV cache (training only)");
  const TensorView lse = ctx.cp ? buffer(&LayerActivations::lse, ws.lse, nh) : TensorView{};
  attend(ctx, layer, packed, kv, options, q, k, v, attn, lse, stats);
  if (tap && tap->wants(TapSite::AttentionProbabilities, global)) tap_attention(ctx, layer, packed, kv, where, q, k, *tap);
  site(TapSite::AttentionHeadOutputs, attn);
  const TensorView p = buffer(&LayerActivations::p, ws.proj, h);
  linear(attn, w.o_proj, wq.o_proj, p);  // row-parallel: partial sums
  reduce(p);
  round(p);
  const TensorView normed = saved ? sized(ws.normed, n, h, dev) : p;  // p itself is kept for the backward
  layer_parts::post_norm(p, w.post_attention_layernorm, eps, act, normed);
  site(TapSite::AttentionOutput, normed);
  if (stats) stats->attention_norm_sum += ops::sum_row_norms(normed);
  ops::add_inplace(x, normed, act);
  site(TapSite::LayerMid, x);
  if (saved && keeps(options.recompute, &LayerActivations::x1)) saved->x1 = copy_of(x);

  // ---- MLP block ----
  const TensorView gate = buffer(&LayerActivations::gate, ws.gate, inter);
  const TensorView up = buffer(&LayerActivations::up, ws.up, inter);
  linear(x, w.gate_proj, wq.gate_proj, gate);
  linear(x, w.up_proj, wq.up_proj, up);
  round(gate), round(up);
  const TensorView mixed = sized(ws.act, n, inter, dev);
  ops::swiglu(gate, up, mixed, act);
  site(TapSite::MlpNeurons, mixed);
  const TensorView m = buffer(&LayerActivations::m, ws.proj, h);
  linear(mixed, w.down_proj, wq.down_proj, m);  // row-parallel
  reduce(m);
  round(m);
  const TensorView normed2 = saved ? sized(ws.normed, n, h, dev) : m;
  layer_parts::post_norm(m, w.post_feedforward_layernorm, eps, act, normed2);
  site(TapSite::MlpOutput, normed2);
  ops::add_inplace(x, normed2, act);
  site(TapSite::LayerOutput, x);
  if (stats) {
    stats->mlp_norm_sum += ops::sum_row_norms(normed2);
    stats->output_norm_sum += ops::sum_row_norms(x);
  }
}

}  // namespace olmo2
