// Pieces the decoder layer's forward and its recomputation share
// (runtime/model/decoder_layer_parts.h).
#include "runtime/model/decoder_layer_parts.h"

#include "ops/attention.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/tensor_ops.h"
#include "parallel/tp_qk_norm.h"
#include "runtime/model/ring_attention.h"
#include "runtime/model/rope_frequencies.h"

namespace olmo2::layer_parts {

TensorView sized(Tensor& t, int64_t rows, int64_t cols, Device device) {
  if (t.shape() != std::vector<int64_t>{rows, cols} || t.device() != device) {
    t = Tensor::zeros({rows, cols}, DType::F32, device);
  }
  return t.view();
}

Tensor copy_of(const TensorView& v) {
  Tensor c = Tensor::zeros(v.shape(), v.dtype(), v.device());
  ops::copy(v, c.view());
  return c;
}

void round_to_activation(const TensorView& t, DType act) {
  if (act != DType::F32) ops::round_to(t, act);
}

void qk_norm_rope(const LayerContext& ctx, const LayerWeights& w, int64_t layer, const PackedTokens& packed,
                  DType act, const TensorView& q0, const TensorView& k0, const TensorView& q, const TensorView& k) {
  const ModelConfig& c = ctx.config;
  const ShardSpec& sh = ctx.shard;
  const int64_t hd = c.head_dim;
  const int nh = static_cast<int>(sh.q_heads.size()), nkv = static_cast<int>(sh.kv_heads.size());
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (ctx.tp) {  // in place on q, k: one [T, 2] all-reduce of the sums of squares
    if (q.data() != q0.data()) ops::copy(q0, q);
    if (k.data() != k0.data()) ops::copy(k0, k);
    parallel::tp_qk_norm(q, w.q_norm.view(), c.num_attention_heads * hd, k, w.k_norm.view(),
                         c.num_key_value_heads * hd, sh.k_counts, eps, *ctx.tp);
  } else {
    ops::rmsnorm(q0, w.q_norm.view(), eps, q);
    ops::rmsnorm(k0, w.k_norm.view(), eps, k);
  }
  round_to_activation(q, act), round_to_activation(k, act);
  const ops::RopeFrequencies rope = rope_frequencies(c.rope_parameters(layer), static_cast<int>(hd));
  ops::rope(q, packed.positions.view(), nh, static_cast<int>(hd), rope);
  ops::rope(k, packed.positions.view(), nkv, static_cast<int>(hd), rope);
  round_to_activation(q, act), round_to_activation(k, act);
}

void attend_own_rows(const LayerContext& ctx, int64_t layer, const PackedTokens& packed, DType act,
                     const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     const TensorView& lse) {
  const int nh = static_cast<int>(ctx.shard.q_heads.size()), nkv = static_cast<int>(ctx.shard.kv_heads.size());
  const int64_t window = ctx.config.attention_window(layer);
  if (ctx.cp) {
    OLMO2_CHECK(packed.context, "context-parallel attention needs the rows' zigzag split (PackedTokens::context)");
    Tensor scratch;
    const TensorView l = !lse.empty() ? lse : sized(scratch, packed.rows(), nh, q.device());
    ring_attention_forward(*ctx.cp, *packed.context, q, k, v, nh, nkv, window, act, out, l);
    return;
  }
  for (size_t i = 0; i < packed.sequences(); ++i) {
    ops::causal_attention(packed.rows_of(q, i), packed.rows_of(k, i), packed.rows_of(v, i), nh, nkv,
                          packed.rows_of(out, i), act, window);
  }
}

void post_norm(const TensorView& in, const Tensor& gain, float eps, DType act, const TensorView& out) {
  ops::rmsnorm(in, gain.view(), eps, out);
  round_to_activation(out, act);
}

}  // namespace olmo2::layer_parts
