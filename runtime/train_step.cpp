#include "runtime/train_step.h"

#include <algorithm>
#include <cstring>

#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"

namespace olmo2 {
namespace {

/// What one layer's backward needs from its forward, each [tokens, width] f32.
struct LayerActivations {
  Tensor x;       ///< layer input (residual stream)
  Tensor q0, k0;  ///< q/k projections before QK-norm
  Tensor qr, kr;  ///< after QK-norm and RoPE
  Tensor v;       ///< value projection
  Tensor attn;    ///< attention output, before o_proj
  Tensor p;       ///< o_proj output, before post_attention_layernorm
  Tensor x1;      ///< residual after the attention block
  Tensor gate, up;
  Tensor m;       ///< down_proj output, before post_feedforward_layernorm
};

struct Batch {
  std::vector<int64_t> offset;  ///< sequence i is rows [offset[i], offset[i+1])
  std::vector<int32_t> ids, pos, targets;
  int64_t total() const { return offset.back(); }
};

Batch pack(const std::vector<Sample>& samples, int64_t vocab) {
  Batch b;
  b.offset.push_back(0);
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if (s.input_ids.empty()) OLMO2_THROW(InputError, "sample ", i, " of the micro-batch is empty");
    if (s.labels.size() != s.input_ids.size()) {
      OLMO2_THROW(InputError, "sample ", i, " has ", s.input_ids.size(), " input ids but ",
                  s.labels.size(), " labels");
    }
    for (size_t t = 0; t < s.input_ids.size(); ++t) {
      const int32_t id = s.input_ids[t], label = s.labels[t];
      if (id < 0 || id >= vocab) {
        OLMO2_THROW(InputError, "token id ", id, " at position ", t, " of sample ", i,
                    " is outside the vocabulary [0, ", vocab, ")");
      }
      if (label != kIgnoreIndex && (label < 0 || label >= vocab)) {
        OLMO2_THROW(InputError, "label ", label, " at position ", t, " of sample ", i,
                    " is neither -100 nor in [0, ", vocab, ")");
      }
      b.ids.push_back(id), b.targets.push_back(label), b.pos.push_back(static_cast<int32_t>(t));
    }
    b.offset.push_back(static_cast<int64_t>(b.ids.size()));
  }
  return b;
}

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::zeros(t.shape());
  std::memcpy(c.f32(), t.f32(), t.view().bytes());
  return c;
}

LossSums run(const Olmo2Model& model, ModelWeights* grads, const std::vector<Sample>& samples,
             float z_coef, float scale, int64_t chunk) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  OLMO2_CHECK(model.shard().layers.size() == c.num_hidden_layers && model.shard().q_heads.size() ==
                  c.num_attention_heads && model.shard().vocab_rows.size() == c.vocab_size,
              "training on one process needs the whole model");
  OLMO2_CHECK(chunk > 0, "loss chunk ", chunk);
  const Batch b = pack(samples, c.vocab_size);
  const int64_t n = b.total(), h = c.hidden_size, hd = c.head_dim;
  const int nh = static_cast<int>(c.num_attention_heads), nkv = static_cast<int>(c.num_key_value_heads);
  const int64_t qw = nh * hd, kvw = nkv * hd, inter = c.intermediate_size, V = c.vocab_size;
  const float eps = static_cast<float>(c.rms_norm_eps), theta = static_cast<float>(c.rope_theta);
  const size_t nseq = samples.size();
  auto seq = [&](const Tensor& t, size_t i) { return t.view().rows(b.offset[i], b.offset[i + 1]); };

  // ---- forward, keeping activations ----
  Tensor x = Tensor::zeros({n, h});
  ops::embedding(b.ids.data(), n, w.embed_tokens.view(), x.view());
  std::vector<LayerActivations> acts(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    LayerActivations& a = acts[l];
    a.x = copy_of(x);
    a.q0 = Tensor::zeros({n, qw}), a.k0 = Tensor::zeros({n, kvw}), a.v = Tensor::zeros({n, kvw});
    ops::linear(x.view(), lw.q_proj.view(), a.q0.view());
    ops::linear(x.view(), lw.k_proj.view(), a.k0.view());
    ops::linear(x.view(), lw.v_proj.view(), a.v.view());
    a.qr = Tensor::zeros({n, qw}), a.kr = Tensor::zeros({n, kvw});
    ops::rmsnorm(a.q0.view(), lw.q_norm.view(), eps, a.qr.view());
    ops::rmsnorm(a.k0.view(), lw.k_norm.view(), eps, a.kr.view());
    ops::rope(a.qr.view(), b.pos.data(), nh, static_cast<int>(hd), theta);
    ops::rope(a.kr.view(), b.pos.data(), nkv, static_cast<int>(hd), theta);
    a.attn = Tensor::zeros({n, qw});
    for (size_t i = 0; i < nseq; ++i) {
      ops::causal_attention(seq(a.qr, i), seq(a.kr, i), seq(a.v, i), nh, nkv, seq(a.attn, i));
    }
    a.p = Tensor::zeros({n, h});
    ops::linear(a.attn.view(), lw.o_proj.view(), a.p.view());
    Tensor normed = Tensor::zeros({n, h});
    ops::rmsnorm(a.p.view(), lw.post_attention_layernorm.view(), eps, normed.view());
    ops::add_inplace(x.view(), normed.view());
    a.x1 = copy_of(x);
    a.gate = Tensor::zeros({n, inter}), a.up = Tensor::zeros({n, inter});
    ops::linear(x.view(), lw.gate_proj.view(), a.gate.view());
    ops::linear(x.view(), lw.up_proj.view(), a.up.view());
    Tensor s = Tensor::zeros({n, inter});
    ops::swiglu(a.gate.view(), a.up.view(), s.view());
    a.m = Tensor::zeros({n, h});
    ops::linear(s.view(), lw.down_proj.view(), a.m.view());
    ops::rmsnorm(a.m.view(), lw.post_feedforward_layernorm.view(), eps, normed.view());
    ops::add_inplace(x.view(), normed.view());
  }
  // x is now the last layer's output; xn the final-normed hidden state.
  Tensor xn = Tensor::zeros({n, h});
  ops::rmsnorm(x.view(), w.norm.view(), eps, xn.view());

  // ---- lm_head + loss (+ its backward) in row chunks ----
  const bool tied = c.tie_word_embeddings;
  const TensorView head = tied ? w.embed_tokens.view() : w.lm_head.view();
  const TensorView dhead = !grads ? TensorView{} : tied ? grads->embed_tokens.view() : grads->lm_head.view();
  Tensor dxn = grads ? Tensor::zeros({n, h}) : Tensor();
  Tensor logits = Tensor::zeros({std::min(chunk, n), V});
  LossSums sums;
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk);
    const TensorView lg = logits.view().rows(0, r1 - r0);
    ops::linear(xn.view().rows(r0, r1), head, lg);
    const ops::CrossEntropySums cs =
        ops::cross_entropy_zloss(lg, b.targets.data() + r0, z_coef, scale, grads ? lg : TensorView{});
    sums.ce_sum += cs.ce_sum, sums.z_sq_sum += cs.z_sq_sum, sums.count += cs.count;
    if (grads) ops::linear_backward(xn.view().rows(r0, r1), head, lg, dxn.view().rows(r0, r1), dhead);
  }
  if (!grads) return sums;

  // ---- backward ----
  ModelWeights& g = *grads;
  Tensor dx = Tensor::zeros({n, h});  // gradient of the residual stream
  ops::rmsnorm_backward(x.view(), w.norm.view(), eps, dxn.view(), dx.view(), g.norm.view());
  Tensor dh = Tensor::zeros({n, h}), ds = Tensor::zeros({n, inter}), dgate = Tensor::zeros({n, inter}),
         dup = Tensor::zeros({n, inter}), s = Tensor::zeros({n, inter}), dattn = Tensor::zeros({n, qw}),
         dq = Tensor::zeros({n, qw}), dk = Tensor::zeros({n, kvw}), dv = Tensor::zeros({n, kvw});
  for (size_t l = w.layers.size(); l-- > 0;) {
    const LayerWeights& lw = w.layers[l];
    LayerWeights& lg = g.layers[l];
    LayerActivations& a = acts[l];
    // MLP block: x2 = x1 + norm(down(swiglu(gate(x1), up(x1)))).
    ops::rmsnorm_backward(a.m.view(), lw.post_feedforward_layernorm.view(), eps, dx.view(), dh.view(),
                          lg.post_feedforward_layernorm.view());
    ops::swiglu(a.gate.view(), a.up.view(), s.view());
    ops::linear_backward(s.view(), lw.down_proj.view(), dh.view(), ds.view(), lg.down_proj.view());
    ops::swiglu_backward(a.gate.view(), a.up.view(), ds.view(), dgate.view(), dup.view());
    ops::linear_backward(a.x1.view(), lw.gate_proj.view(), dgate.view(), dx.view(), lg.gate_proj.view(),
                         true, true);
    ops::linear_backward(a.x1.view(), lw.up_proj.view(), dup.view(), dx.view(), lg.up_proj.view(), true,
                         true);
    a.gate = Tensor(), a.up = Tensor(), a.m = Tensor(), a.x1 = Tensor();
    // Attention block: x1 = x + norm(o(attention(rope(qnorm(q(x))), rope(knorm(k(x))), v(x)))).
    ops::rmsnorm_backward(a.p.view(), lw.post_attention_layernorm.view(), eps, dx.view(), dh.view(),
                          lg.post_attention_layernorm.view());
    ops::linear_backward(a.attn.view(), lw.o_proj.view(), dh.view(), dattn.view(), lg.o_proj.view());
    for (size_t i = 0; i < nseq; ++i) {
      ops::causal_attention_backward(seq(a.qr, i), seq(a.kr, i), seq(a.v, i), seq(dattn, i), nh, nkv,
                                     seq(dq, i), seq(dk, i), seq(dv, i));
    }
    ops::rope_backward(dq.view(), b.pos.data(), nh, static_cast<int>(hd), theta);
    ops::rope_backward(dk.view(), b.pos.data(), nkv, static_cast<int>(hd), theta);
    ops::rmsnorm_backward(a.q0.view(), lw.q_norm.view(), eps, dq.view(), dq.view(), lg.q_norm.view());
    ops::rmsnorm_backward(a.k0.view(), lw.k_norm.view(), eps, dk.view(), dk.view(), lg.k_norm.view());
    ops::linear_backward(a.x.view(), lw.q_proj.view(), dq.view(), dx.view(), lg.q_proj.view(), true, true);
    ops::linear_backward(a.x.view(), lw.k_proj.view(), dk.view(), dx.view(), lg.k_proj.view(), true, true);
    ops::linear_backward(a.x.view(), lw.v_proj.view(), dv.view(), dx.view(), lg.v_proj.view(), true, true);
    a = LayerActivations{};  // free this layer's activations early
  }
  ops::embedding_backward(b.ids.data(), n, dx.view(), g.embed_tokens.view());
  return sums;
}

}  // namespace

int64_t count_targets(const std::vector<Sample>& samples) {
  int64_t count = 0;
  for (const Sample& s : samples) {
    for (const int32_t label : s.labels) count += label != kIgnoreIndex;
  }
  return count;
}

LossSums forward_backward(const Olmo2Model& model, ModelWeights& grads, const std::vector<Sample>& samples,
                          float z_coef, float scale, int64_t loss_chunk_tokens) {
  const ModelWeights& w = model.weights();
  OLMO2_CHECK(grads.layers.size() == w.layers.size() && grads.embed_tokens.shape() == w.embed_tokens.shape() &&
                  grads.lm_head.shape() == w.lm_head.shape() && grads.norm.shape() == w.norm.shape(),
              "gradients do not match the model (use zeros_like_weights)");
  return run(model, &grads, samples, z_coef, scale, loss_chunk_tokens);
}

LossSums compute_loss(const Olmo2Model& model, const std::vector<Sample>& samples, float z_coef) {
  return run(model, nullptr, samples, z_coef, 1.0f, 512);
}

}  // namespace olmo2
