#include "runtime/train/train_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "parallel/tp_qk_norm.h"
#include "parallel/vocab_parallel_loss.h"

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

/// The shapes and communicators every piece of one stage's step uses.
struct StageContext {
  const ModelConfig& c;
  const ModelWeights& w;
  const ShardSpec& sh;
  parallel::Communicator* tp;
  int64_t h, hd, qw, kvw, inter, V, q_width, k_width;
  int nh, nkv;
  float eps, theta;
  StageContext(const Olmo2Model& model, const ParallelContext& ctx)
      : c(model.config()), w(model.weights()), sh(model.shard()),
        tp(ctx.tp && ctx.tp->size() > 1 ? ctx.tp : nullptr) {
    h = c.hidden_size, hd = c.head_dim;
    nh = static_cast<int>(sh.q_heads.size()), nkv = static_cast<int>(sh.kv_heads.size());
    qw = nh * hd, kvw = nkv * hd, inter = sh.mlp_rows.size(), V = sh.vocab_rows.size();
    q_width = c.num_attention_heads * hd, k_width = c.num_key_value_heads * hd;
    eps = static_cast<float>(c.rms_norm_eps), theta = static_cast<float>(c.rope_theta);
  }
  void all_reduce(const Tensor& t) const {
    if (tp) tp->all_reduce_sum(std::span<float>(t.f32(), static_cast<size_t>(t.numel())));
  }
};

}  // namespace

struct StageActivations {
  Batch b;
  std::vector<LayerActivations> layers;
  Tensor dx_top;  ///< last stage: d(loss)/d(output of its last layer), from the forward
};

namespace {

void check_stage(const Olmo2Model& model, const ParallelContext& ctx) {
  const ModelConfig& c = model.config();
  const ShardSpec& sh = model.shard();
  parallel::Communicator* tp = ctx.tp && ctx.tp->size() > 1 ? ctx.tp : nullptr;
  const bool staged = !(sh.embedding && sh.final_norm);
  OLMO2_CHECK(!staged || (ctx.pp && ctx.pp->size() > 1), "a pipeline-stage shard needs ctx.pp");
  OLMO2_CHECK(tp || sh.q_heads.size() == c.num_attention_heads, "a tensor-parallel shard needs ctx.tp");
  if (c.tie_word_embeddings && staged) {
    OLMO2_THROW(InputError, "training a model with tie_word_embeddings over ", ctx.pp->size(),
                " pipeline stages is not supported (the embedding and lm_head live on different stages)");
  }
}

}  // namespace

void LayerDiagnostics::reset(size_t layers) {
  output_norm_sum.assign(layers, 0.0), attention_norm_sum.assign(layers, 0.0), mlp_norm_sum.assign(layers, 0.0);
  attention_logit_max.assign(layers, -std::numeric_limits<float>::infinity());
  tokens = 0;
}

namespace {
/// Σ over rows of the row's L2 norm, in double.
double sum_row_norms(const Tensor& t) {
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  double s = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c) sq += double(t.f32()[r * cols + c]) * t.f32()[r * cols + c];
    s += std::sqrt(sq);
  }
  return s;
}

/// Largest q·k/√hd over causal pairs of one sequence (q [T, H·hd], k [T, KV·hd]).
float max_logit(const TensorView& q, const TensorView& k, int nh, int nkv, int64_t hd) {
  const int64_t T = q.shape()[0];
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float best = -std::numeric_limits<float>::infinity();
  for (int h = 0; h < nh; ++h) {
    const int kvh = h / (nh / nkv);
    for (int64_t t = 0; t < T; ++t) {
      const float* qt = q.f32() + t * nh * hd + h * hd;
      for (int64_t j = 0; j <= t; ++j) {
        const float* kj = k.f32() + j * nkv * hd + kvh * hd;
        float d = 0;
        for (int64_t i = 0; i < hd; ++i) d += qt[i] * kj[i];
        best = std::max(best, d * scale);
      }
    }
  }
  return best;
}
}  // namespace

StageForward stage_forward(const Olmo2Model& model, ModelWeights* grads, const std::vector<Sample>& samples,
                           const Tensor& input, float z_coef, float scale, int64_t chunk,
                           const ParallelContext& ctx, LayerDiagnostics* diag) {
  check_stage(model, ctx);
  OLMO2_CHECK(chunk > 0, "loss chunk ", chunk);
  const StageContext s(model, ctx);
  const ModelWeights& w = s.w;
  const ShardSpec& sh = s.sh;
  StageActivationsPtr saved(new StageActivations);
  saved->b = pack(samples, s.c.vocab_size);
  const Batch& b = saved->b;
  const int64_t n = b.total(), h = s.h;
  const size_t nseq = samples.size();
  auto seq = [&](const Tensor& t, size_t i) { return t.view().rows(b.offset[i], b.offset[i + 1]); };

  // ---- this stage's input: the embedding (stage 0) or the previous stage's output ----
  Tensor x;
  if (sh.embedding) {
    x = Tensor::zeros({n, h});
    if (s.tp) {  // vocab-parallel embedding: each rank its rows, one all-reduce
      for (int64_t t = 0; t < n; ++t) {
        if (b.ids[t] >= sh.vocab_rows.begin && b.ids[t] < sh.vocab_rows.end) {
          std::memcpy(x.f32() + t * h, w.embed_tokens.f32() + (b.ids[t] - sh.vocab_rows.begin) * h,
                      sizeof(float) * h);
        }
      }
      s.all_reduce(x);
    } else {
      ops::embedding(b.ids.data(), n, w.embed_tokens.view(), x.view());
    }
  } else {
    if (input.shape() != std::vector<int64_t>{n, h}) {
      OLMO2_THROW(ShapeError, "stage input has shape ", shape_to_string(input.shape()), ", expected [", n, ", ",
                  h, "] for this micro-batch");
    }
    x = copy_of(input);
  }
  if (diag) {
    OLMO2_CHECK(diag->output_norm_sum.size() == w.layers.size(), "diagnostics sized for ",
                diag->output_norm_sum.size(), " layers, the stage has ", w.layers.size());
    diag->tokens += n;
  }
  // ---- the stage's layers, keeping activations ----
  std::vector<LayerActivations>& acts = saved->layers;
  acts.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    LayerActivations& a = acts[l];
    if (grads) a.x = copy_of(x);
    a.q0 = Tensor::zeros({n, s.qw}), a.k0 = Tensor::zeros({n, s.kvw}), a.v = Tensor::zeros({n, s.kvw});
    ops::linear(x.view(), lw.q_proj.view(), a.q0.view());
    ops::linear(x.view(), lw.k_proj.view(), a.k0.view());
    ops::linear(x.view(), lw.v_proj.view(), a.v.view());
    if (s.tp) {  // whole-projection QK-norm: one [T, 2] all-reduce of sums of squares
      a.qr = copy_of(a.q0), a.kr = copy_of(a.k0);
      parallel::tp_qk_norm(a.qr.view(), lw.q_norm.view(), s.q_width, a.kr.view(), lw.k_norm.view(), s.k_width,
                           sh.k_counts, s.eps, *s.tp);
    } else {
      a.qr = Tensor::zeros({n, s.qw}), a.kr = Tensor::zeros({n, s.kvw});
      ops::rmsnorm(a.q0.view(), lw.q_norm.view(), s.eps, a.qr.view());
      ops::rmsnorm(a.k0.view(), lw.k_norm.view(), s.eps, a.kr.view());
    }
    ops::rope(a.qr.view(), b.pos.data(), s.nh, static_cast<int>(s.hd), s.theta);
    ops::rope(a.kr.view(), b.pos.data(), s.nkv, static_cast<int>(s.hd), s.theta);
    a.attn = Tensor::zeros({n, s.qw});
    for (size_t i = 0; i < nseq; ++i) {
      ops::causal_attention(seq(a.qr, i), seq(a.kr, i), seq(a.v, i), s.nh, s.nkv, seq(a.attn, i));
      if (diag) {
        diag->attention_logit_max[l] =
            std::max(diag->attention_logit_max[l], max_logit(seq(a.qr, i), seq(a.kr, i), s.nh, s.nkv, s.hd));
      }
    }
    a.p = Tensor::zeros({n, h});
    ops::linear(a.attn.view(), lw.o_proj.view(), a.p.view());
    s.all_reduce(a.p);  // row-parallel o_proj: partial sums
    Tensor normed = Tensor::zeros({n, h});
    ops::rmsnorm(a.p.view(), lw.post_attention_layernorm.view(), s.eps, normed.view());
    if (diag) diag->attention_norm_sum[l] += sum_row_norms(normed);
    ops::add_inplace(x.view(), normed.view());
    if (grads) a.x1 = copy_of(x);
    a.gate = Tensor::zeros({n, s.inter}), a.up = Tensor::zeros({n, s.inter});
    ops::linear(x.view(), lw.gate_proj.view(), a.gate.view());
    ops::linear(x.view(), lw.up_proj.view(), a.up.view());
    Tensor sw = Tensor::zeros({n, s.inter});
    ops::swiglu(a.gate.view(), a.up.view(), sw.view());
    a.m = Tensor::zeros({n, h});
    ops::linear(sw.view(), lw.down_proj.view(), a.m.view());
    s.all_reduce(a.m);  // row-parallel down_proj
    ops::rmsnorm(a.m.view(), lw.post_feedforward_layernorm.view(), s.eps, normed.view());
    ops::add_inplace(x.view(), normed.view());
    if (diag) diag->mlp_norm_sum[l] += sum_row_norms(normed), diag->output_norm_sum[l] += sum_row_norms(x);
    if (!grads) a = LayerActivations{};
  }
  StageForward out;
  if (!sh.final_norm) {
    out.output = std::move(x);
    if (grads) out.saved = std::move(saved);
    return out;
  }

  // ---- last stage: final norm, lm_head + loss (+ their backward) in row chunks ----
  Tensor xn = Tensor::zeros({n, h});
  ops::rmsnorm(x.view(), w.norm.view(), s.eps, xn.view());
  const bool tied = s.c.tie_word_embeddings;
  const TensorView head = tied ? w.embed_tokens.view() : w.lm_head.view();
  const TensorView dhead = !grads ? TensorView{} : tied ? grads->embed_tokens.view() : grads->lm_head.view();
  Tensor dxn = grads ? Tensor::zeros({n, h}) : Tensor();
  Tensor logits = Tensor::zeros({std::min(chunk, n), s.V});
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk);
    const TensorView lg = logits.view().rows(0, r1 - r0);
    ops::linear(xn.view().rows(r0, r1), head, lg);
    const ops::CrossEntropySums cs =
        s.tp ? parallel::vocab_parallel_cross_entropy(lg, sh.vocab_rows.begin, sh.vocab_real.size(),
                                                      s.c.vocab_size, b.targets.data() + r0, z_coef, scale,
                                                      grads ? lg : TensorView{}, *s.tp)
             : ops::cross_entropy_zloss(lg, b.targets.data() + r0, z_coef, scale, grads ? lg : TensorView{});
    out.sums.ce_sum += cs.ce_sum, out.sums.z_sq_sum += cs.z_sq_sum, out.sums.count += cs.count;
    if (grads) ops::linear_backward(xn.view().rows(r0, r1), head, lg, dxn.view().rows(r0, r1), dhead);
  }
  if (!grads) return out;
  s.all_reduce(dxn);  // vocab-parallel lm_head: each rank's share of d(normed hidden)
  saved->dx_top = Tensor::zeros({n, h});
  ops::rmsnorm_backward(x.view(), w.norm.view(), s.eps, dxn.view(), saved->dx_top.view(), grads->norm.view());
  out.saved = std::move(saved);
  return out;
}

Tensor stage_backward(const Olmo2Model& model, ModelWeights& g, StageActivations& saved, const Tensor& grad_output,
                      const ParallelContext& ctx) {
  const StageContext s(model, ctx);
  const ModelWeights& w = s.w;
  const ShardSpec& sh = s.sh;
  const Batch& b = saved.b;
  const int64_t n = b.total(), h = s.h, inter = s.inter;
  const size_t nseq = b.offset.size() - 1;
  auto seq = [&](const Tensor& t, size_t i) { return t.view().rows(b.offset[i], b.offset[i + 1]); };
  Tensor dx;  // gradient of the residual stream (replicated over TP)
  if (sh.final_norm) {
    dx = std::move(saved.dx_top);
  } else {
    if (grad_output.shape() != std::vector<int64_t>{n, h}) {
      OLMO2_THROW(ShapeError, "stage output gradient has shape ", shape_to_string(grad_output.shape()),
                  ", expected [", n, ", ", h, "]");
    }
    dx = copy_of(grad_output);
  }
  parallel::Communicator* tp = s.tp;
  Tensor dxp = tp ? Tensor::zeros({n, h}) : Tensor();  // TP: this rank's partial input gradient
  std::vector<float> qk_stats(tp ? static_cast<size_t>(4 * n) : 0);
  Tensor dh = Tensor::zeros({n, h}), ds = Tensor::zeros({n, inter}), dgate = Tensor::zeros({n, inter}),
         dup = Tensor::zeros({n, inter}), sw = Tensor::zeros({n, inter}), dattn = Tensor::zeros({n, s.qw}),
         dq = Tensor::zeros({n, s.qw}), dk = Tensor::zeros({n, s.kvw}), dv = Tensor::zeros({n, s.kvw});
  for (size_t l = w.layers.size(); l-- > 0;) {
    const LayerWeights& lw = w.layers[l];
    LayerWeights& lg = g.layers[l];
    LayerActivations& a = saved.layers[l];
    // MLP block: x2 = x1 + norm(down(swiglu(gate(x1), up(x1)))).
    ops::rmsnorm_backward(a.m.view(), lw.post_feedforward_layernorm.view(), s.eps, dx.view(), dh.view(),
                          lg.post_feedforward_layernorm.view());
    ops::swiglu(a.gate.view(), a.up.view(), sw.view());
    ops::linear_backward(sw.view(), lw.down_proj.view(), dh.view(), ds.view(), lg.down_proj.view());
    ops::swiglu_backward(a.gate.view(), a.up.view(), ds.view(), dgate.view(), dup.view());
    // Column-parallel gate/up: each rank's input gradient is partial; sum them over TP.
    const TensorView din = tp ? dxp.view() : dx.view();
    ops::linear_backward(a.x1.view(), lw.gate_proj.view(), dgate.view(), din, lg.gate_proj.view(), true, !tp);
    ops::linear_backward(a.x1.view(), lw.up_proj.view(), dup.view(), din, lg.up_proj.view(), true, true);
    if (tp) {
      s.all_reduce(dxp);
      ops::add_inplace(dx.view(), dxp.view());
    }
    a.gate = Tensor(), a.up = Tensor(), a.m = Tensor(), a.x1 = Tensor();
    // Attention block: x1 = x + norm(o(attention(rope(qnorm(q(x))), rope(knorm(k(x))), v(x)))).
    ops::rmsnorm_backward(a.p.view(), lw.post_attention_layernorm.view(), s.eps, dx.view(), dh.view(),
                          lg.post_attention_layernorm.view());
    ops::linear_backward(a.attn.view(), lw.o_proj.view(), dh.view(), dattn.view(), lg.o_proj.view());
    for (size_t i = 0; i < nseq; ++i) {
      ops::causal_attention_backward(seq(a.qr, i), seq(a.kr, i), seq(a.v, i), seq(dattn, i), s.nh, s.nkv,
                                     seq(dq, i), seq(dk, i), seq(dv, i));
    }
    ops::rope_backward(dq.view(), b.pos.data(), s.nh, static_cast<int>(s.hd), s.theta);
    ops::rope_backward(dk.view(), b.pos.data(), s.nkv, static_cast<int>(s.hd), s.theta);
    if (tp) {
      // Whole-projection QK-norm backward: one [T, 4] all-reduce of Σx², Σg·w·x for q and
      // k. A kv head replicated on several ranks (KV < tp) has a partial dk on each (from
      // its own query heads): every replica adds its partial Σg·w·x, only the first adds
      // Σk², and only the first applies the −x·r³·dot term, so the replicas' input and
      // weight gradients sum to the unsplit ones (grad_sync sums k/v grads over replicas).
      float* st = qk_stats.data();
      std::vector<float> part(static_cast<size_t>(2 * n));
      ops::rmsnorm_backward_partials(a.q0.view(), lw.q_norm.view(), dq.view(), part.data(), part.data() + n);
      ops::rmsnorm_backward_partials(a.k0.view(), lw.k_norm.view(), dk.view(), st + 2 * n, st + 3 * n);
      if (!sh.k_counts) std::fill(st + 2 * n, st + 3 * n, 0.0f);
      std::memcpy(st, part.data(), sizeof(float) * static_cast<size_t>(2 * n));
      tp->all_reduce_sum(qk_stats);
      ops::rmsnorm_backward_finish(a.q0.view(), lw.q_norm.view(), s.eps, s.q_width, dq.view(), st, st + n,
                                   dq.view(), lg.q_norm.view());
      if (!sh.k_counts) std::fill(st + 3 * n, st + 4 * n, 0.0f);
      ops::rmsnorm_backward_finish(a.k0.view(), lw.k_norm.view(), s.eps, s.k_width, dk.view(), st + 2 * n,
                                   st + 3 * n, dk.view(), lg.k_norm.view());
    } else {
      ops::rmsnorm_backward(a.q0.view(), lw.q_norm.view(), s.eps, dq.view(), dq.view(), lg.q_norm.view());
      ops::rmsnorm_backward(a.k0.view(), lw.k_norm.view(), s.eps, dk.view(), dk.view(), lg.k_norm.view());
    }
    {
      const TensorView din = tp ? dxp.view() : dx.view();
      ops::linear_backward(a.x.view(), lw.q_proj.view(), dq.view(), din, lg.q_proj.view(), true, !tp);
      ops::linear_backward(a.x.view(), lw.k_proj.view(), dk.view(), din, lg.k_proj.view(), true, true);
      ops::linear_backward(a.x.view(), lw.v_proj.view(), dv.view(), din, lg.v_proj.view(), true, true);
      if (tp) {
        s.all_reduce(dxp);
        ops::add_inplace(dx.view(), dxp.view());
      }
    }
    a = LayerActivations{};  // free this layer's activations early
  }
  if (!sh.embedding) return dx;  // d(stage input), for the previous stage
  if (tp) {  // vocab-parallel: each rank adds the rows of the ids it holds
    for (int64_t t = 0; t < n; ++t) {
      if (b.ids[t] < sh.vocab_rows.begin || b.ids[t] >= sh.vocab_rows.end) continue;
      float* row = g.embed_tokens.f32() + (b.ids[t] - sh.vocab_rows.begin) * h;
      for (int64_t i = 0; i < h; ++i) row[i] += dx.f32()[t * h + i];
    }
  } else {
    ops::embedding_backward(b.ids.data(), n, dx.view(), g.embed_tokens.view());
  }
  return Tensor();
}

namespace {
}  // namespace

int64_t count_targets(const std::vector<Sample>& samples) {
  int64_t count = 0;
  for (const Sample& s : samples) {
    for (const int32_t label : s.labels) count += label != kIgnoreIndex;
  }
  return count;
}

void StageActivationsDeleter::operator()(StageActivations* p) const { delete p; }

LossSums forward_backward(const Olmo2Model& model, ModelWeights& grads, const std::vector<Sample>& samples,
                          float z_coef, float scale, int64_t loss_chunk_tokens, const ParallelContext& ctx) {
  const ModelWeights& w = model.weights();
  OLMO2_CHECK(grads.layers.size() == w.layers.size() && grads.embed_tokens.shape() == w.embed_tokens.shape() &&
                  grads.lm_head.shape() == w.lm_head.shape() && grads.norm.shape() == w.norm.shape(),
              "gradients do not match the model (use zeros_like_weights)");
  OLMO2_CHECK(model.shard().embedding && model.shard().final_norm,
              "forward_backward needs every layer on this rank (pipeline stages: pipeline_forward_backward)");
  StageForward f = stage_forward(model, &grads, samples, Tensor(), z_coef, scale, loss_chunk_tokens, ctx);
  stage_backward(model, grads, *f.saved, Tensor(), ctx);
  return f.sums;
}

LossSums compute_loss(const Olmo2Model& model, const std::vector<Sample>& samples, float z_coef,
                      const ParallelContext& ctx) {
  OLMO2_CHECK(model.shard().embedding && model.shard().final_norm,
              "compute_loss needs every layer on this rank");
  return stage_forward(model, nullptr, samples, Tensor(), z_coef, 1.0f, 512, ctx).sums;
}

}  // namespace olmo2
