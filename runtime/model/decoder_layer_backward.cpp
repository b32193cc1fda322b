// The backward of one OLMo 2 decoder layer (runtime/model/decoder_layer.h): the
// derivative of decoder_layer_forward with f32 activations and no KV cache, after the
// activations a Recompute mode dropped are recomputed (decoder_layer_recompute.cpp).
#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/elementwise.h"
#include "ops/rmsnorm.h"
#include "parallel/tensor_collectives.h"
#include "parallel/tp_qk_norm.h"
#include "runtime/model/decoder_layer.h"
#include "runtime/model/decoder_layer_parts.h"
#include "runtime/model/ring_attention.h"
#include "runtime/model/rope_frequencies.h"

namespace olmo2 {
using layer_parts::sized;

void decoder_layer_backward(const LayerContext& ctx, const LayerWeights& w, LayerWeights& g,
                            const PackedTokens& packed, LayerActivations& a, const TensorView& dx,
                            LayerBackwardWorkspace& ws) {
  const ModelConfig& c = ctx.config;
  const ShardSpec& sh = ctx.shard;
  parallel::Communicator* tp = ctx.tp;
  const int64_t n = packed.rows(), h = c.hidden_size, hd = c.head_dim;
  const int nh = static_cast<int>(sh.q_heads.size()), nkv = static_cast<int>(sh.kv_heads.size());
  const int64_t qw = nh * hd, kvw = nkv * hd, inter = sh.mlp_rows.size();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const ops::RopeFrequencies rope = rope_frequencies(c.rope_parameters(a.layer), static_cast<int>(hd));
  const int64_t window = c.attention_window(a.layer);
  OLMO2_CHECK(dx.shape() == std::vector<int64_t>({n, h}) && a.x.shape() == std::vector<int64_t>({n, h}),
              "layer backward: dx ", dx.shape_str(), " for ", n, " tokens (activations kept for ",
              shape_to_string(a.x.shape()), ")");
  recompute_activations(ctx, w, packed, a, ws.forward);  // what the forward's Recompute mode dropped
  const Device dev = dx.device();  // scratch beside the gradients it holds
  const TensorView dh = sized(ws.dh, n, h, dev), ds = sized(ws.ds, n, inter, dev),
                   dgate = sized(ws.dgate, n, inter, dev), dup = sized(ws.dup, n, inter, dev),
                   sw = sized(ws.sw, n, inter, dev), dattn = sized(ws.dattn, n, qw, dev), dq = sized(ws.dq, n, qw, dev),
                   dk = sized(ws.dk, n, kvw, dev), dv = sized(ws.dv, n, kvw, dev);
  // Under TP the column-parallel products give each rank a partial input gradient: summed
  // over the group, then added to the residual stream's gradient.
  const TensorView din = tp ? sized(ws.dxp, n, h, dev) : dx;
  auto finish_input_gradient = [&] {
    if (!tp) return;
    parallel::all_reduce_sum(*tp, din);
    ops::add_inplace(dx, din);
  };

  // MLP block: x2 = x1 + norm(down(swiglu(gate(x1), up(x1)))).
  ops::rmsnorm_backward(a.m.view(), w.post_feedforward_layernorm.view(), eps, dx, dh,
                        g.post_feedforward_layernorm.view());
  ops::swiglu(a.gate.view(), a.up.view(), sw, a.act);  // down_proj's input as the forward rounded it
  ops::linear_backward(sw, w.down_proj.view(), dh, ds, g.down_proj.view());
  ops::swiglu_backward(a.gate.view(), a.up.view(), ds, dgate, dup);
  ops::linear_backward(a.x1.view(), w.gate_proj.view(), dgate, din, g.gate_proj.view(), true, !tp);
  ops::linear_backward(a.x1.view(), w.up_proj.view(), dup, din, g.up_proj.view(), true, true);
  finish_input_gradient();
  a.gate = Tensor(), a.up = Tensor(), a.m = Tensor(), a.x1 = Tensor();

  // Attention block: x1 = x + norm(o(attention(rope(qnorm(q(x))), rope(knorm(k(x))), v(x)))).
  ops::rmsnorm_backward(a.p.view(), w.post_attention_layernorm.view(), eps, dx, dh,
                        g.post_attention_layernorm.view());
  ops::linear_backward(a.attn.view(), w.o_proj.view(), dh, dattn, g.o_proj.view());
  if (ctx.cp) {  // ring attention's backward over the CP group (docs/architecture.md §7 "Context parallelism")
    ring_attention_backward(*ctx.cp, *packed.context, a.qr.view(), a.kr.view(), a.v.view(), a.attn.view(),
                            a.lse.view(), dattn, nh, nkv, window, dq, dk, dv, a.act);
  }
  for (size_t i = 0; !ctx.cp && i < packed.sequences(); ++i) {
    ops::causal_attention_backward(packed.rows_of(a.qr.view(), i), packed.rows_of(a.kr.view(), i),
                                   packed.rows_of(a.v.view(), i), packed.rows_of(dattn, i), nh, nkv,
                                   packed.rows_of(dq, i), packed.rows_of(dk, i), packed.rows_of(dv, i), window);
  }
  ops::rope_backward(dq, packed.positions.view(), nh, static_cast<int>(hd), rope);
  ops::rope_backward(dk, packed.positions.view(), nkv, static_cast<int>(hd), rope);
  if (tp) {
    parallel::tp_qk_norm_backward(a.q0.view(), w.q_norm.view(), c.num_attention_heads * hd, dq, g.q_norm.view(),
                                  a.k0.view(), w.k_norm.view(), c.num_key_value_heads * hd, dk, g.k_norm.view(),
                                  sh.k_counts, eps, *tp);
  } else {
    ops::rmsnorm_backward(a.q0.view(), w.q_norm.view(), eps, dq, dq, g.q_norm.view());
    ops::rmsnorm_backward(a.k0.view(), w.k_norm.view(), eps, dk, dk, g.k_norm.view());
  }
  ops::linear_backward(a.x.view(), w.q_proj.view(), dq, din, g.q_proj.view(), true, !tp);
  ops::linear_backward(a.x.view(), w.k_proj.view(), dk, din, g.k_proj.view(), true, true);
  ops::linear_backward(a.x.view(), w.v_proj.view(), dv, din, g.v_proj.view(), true, true);
  finish_input_gradient();
  a = LayerActivations{};  // free this layer's activations early
}

}  // namespace olmo2
