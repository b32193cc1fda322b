// Activation recomputation of one decoder layer (runtime/model/decoder_layer.h): what a
// Recompute mode dropped in the forward, rebuilt at the start of the layer's backward by
// the forward's own operations (docs/architecture.md §7 "Recomputation").
#include "core/error.h"
#include "ops/elementwise.h"
#include "runtime/model/decoder_layer.h"
#include "runtime/model/decoder_layer_parts.h"

namespace olmo2 {

Recompute parse_recompute(const std::string& text, const std::string& option) {
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    if (text == recompute_name(mode)) return mode;
  }
  OLMO2_THROW(InputError, option, " must be none, selective or full, got \"", text, "\"");
}

const char* recompute_name(Recompute mode) {
  static constexpr const char* kNames[] = {"none", "selective", "full"};  // in the enum's order
  return kNames[static_cast<int>(mode)];
}

namespace {

/// A new [rows, cols] f32 tensor on `device`.
Tensor fresh(int64_t rows, int64_t cols, Device device) { return Tensor::zeros({rows, cols}, DType::F32, device); }

/// Selective: qr, kr, attn and x1 from x, q0, k0, v and p, as decoder_layer_forward made them.
void recompute_selective(const LayerContext& ctx, const LayerWeights& w, const PackedTokens& packed,
                         LayerActivations& a) {
  const int64_t n = packed.rows();
  const Device dev = a.x.device();
  OLMO2_CHECK(!a.q0.empty() && !a.k0.empty() && !a.v.empty() && !a.p.empty() && !a.gate.empty() && !a.up.empty() &&
                  !a.m.empty(),
              "selective recomputation of layer ", a.layer, ": the forward did not keep q0, k0, v, p, gate, up, m");
  a.qr = fresh(n, a.q0.shape()[1], dev), a.kr = fresh(n, a.k0.shape()[1], dev);
  layer_parts::qk_norm_rope(ctx, w, a.layer, packed, a.act, a.q0.view(), a.k0.view(), a.qr.view(), a.kr.view());
  a.attn = fresh(n, a.q0.shape()[1], dev);
  if (ctx.cp) a.lse = fresh(n, static_cast<int64_t>(ctx.shard.q_heads.size()), dev);  // ring attention's, for the backward
  layer_parts::attend_own_rows(ctx, a.layer, packed, a.act, a.qr.view(), a.kr.view(), a.v.view(), a.attn.view(),
                               a.lse.view());
  // x1 = x + post_attention_layernorm(p), summed (and rounded) as the forward summed it.
  a.x1 = layer_parts::copy_of(a.x.view());
  Tensor normed = fresh(n, a.p.shape()[1], dev);
  layer_parts::post_norm(a.p.view(), w.post_attention_layernorm, static_cast<float>(ctx.config.rms_norm_eps), a.act,
                         normed.view());
  ops::add_inplace(a.x1.view(), normed.view(), a.act);
  a.recompute = Recompute::None;  // the whole set is held now
}

}  // namespace

void recompute_activations(const LayerContext& ctx, const LayerWeights& w, const PackedTokens& packed,
                           LayerActivations& a, LayerWorkspace& ws) {
  OLMO2_CHECK(!a.x.empty(), "recomputation of layer ", a.layer, ": the forward kept no input");
  switch (a.recompute) {
    case Recompute::None:
      return;
    case Recompute::Selective:
      recompute_selective(ctx, w, packed, a);
      return;
    case Recompute::Full: {
      // The layer's forward again from its input, keeping everything: its copy of x
      // becomes the kept input and the residual stream it updates (a.x) is dropped.
      LayerActivations all;
      const LayerOptions options{a.act, a.batch_invariant, nullptr, Recompute::None};
      decoder_layer_forward(ctx, w, ctx.shard.local_layer(a.layer), packed, nullptr, options, a.x.view(), ws, &all,
                            nullptr);
      a = std::move(all);
      return;
    }
  }
}

}  // namespace olmo2
