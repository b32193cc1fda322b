#include "runtime/model/parameters.h"

#include "core/error.h"

namespace olmo2 {

int64_t Parameter::global_index(int64_t i) const {
  if (shard_dim < 0) return i;
  const std::vector<int64_t>& local = value->shape();
  // Row-major strides of the local and full tensors.
  int64_t rest = i, global = 0, full_stride = 1;
  std::vector<int64_t> idx(local.size());
  for (int d = static_cast<int>(local.size()) - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = rest % local[static_cast<size_t>(d)];
    rest /= local[static_cast<size_t>(d)];
  }
  idx[static_cast<size_t>(shard_dim)] += shard_begin;
  if (idx[static_cast<size_t>(shard_dim)] >= full_shape[static_cast<size_t>(shard_dim)]) return -1;
  for (int d = static_cast<int>(full_shape.size()) - 1; d >= 0; --d) {
    global += idx[static_cast<size_t>(d)] * full_stride;
    full_stride *= full_shape[static_cast<size_t>(d)];
  }
  return global;
}

ModelWeights zero_weights(const ModelConfig& c, const ShardSpec& sh, Device device) {
  auto z = [device](std::vector<int64_t> shape) { return Tensor::zeros(std::move(shape), DType::F32, device); };
  const int64_t h = c.hidden_size, hd = c.head_dim, qw = sh.q_heads.size() * hd,
                kvw = sh.kv_heads.size() * hd, inter = sh.mlp_rows.size(), vocab = sh.vocab_rows.size();
  ModelWeights w;
  if (sh.embedding || (sh.final_norm && c.tie_word_embeddings)) w.embed_tokens = z({vocab, h});
  for (int64_t l = 0; l < sh.layer_count(); ++l) {
    w.layers.push_back(LayerWeights{z({qw, h}), z({kvw, h}), z({kvw, h}),
                                    z({h, qw}), z({qw}), z({kvw}),
                                    z({inter, h}), z({inter, h}),
                                    z({h, inter}), z({h}), z({h}), {}});
  }
  if (sh.final_norm) {
    w.norm = z({h});
    if (!c.tie_word_embeddings) w.lm_head = z({vocab, h});
  }
  return w;
}

ModelWeights zeros_like_weights(const ModelWeights& w) {
  auto z = [](const Tensor& t) {
    return !t.shape().empty() && t.numel() > 0 ? Tensor::zeros(t.shape(), DType::F32, t.device()) : Tensor();
  };
  ModelWeights g;
  g.embed_tokens = z(w.embed_tokens);
  for (const LayerWeights& l : w.layers) {
    g.layers.push_back(LayerWeights{z(l.q_proj), z(l.k_proj), z(l.v_proj), z(l.o_proj), z(l.q_norm),
                                    z(l.k_norm), z(l.gate_proj), z(l.up_proj), z(l.down_proj),
                                    z(l.post_attention_layernorm), z(l.post_feedforward_layernorm), {}});
  }
  g.norm = z(w.norm);
  g.lm_head = z(w.lm_head);
  return g;
}

std::vector<Parameter> list_parameters(ModelWeights& w, ModelWeights& g, const ModelConfig& c,
                                       const ShardSpec& sh) {
  OLMO2_CHECK(w.layers.size() == g.layers.size(), "gradient layers ", g.layers.size(),
              " != weight layers ", w.layers.size());
  const int64_t h = c.hidden_size, hd = c.head_dim, q = c.num_attention_heads * hd,
                kv = c.num_key_value_heads * hd, inter = c.intermediate_size, V = c.vocab_size;
  std::vector<Parameter> out;
  auto add = [&](std::string name, Tensor& value, Tensor& grad, std::vector<int64_t> full, int dim,
                 parallel::Range range, bool replicated) {
    if (value.shape().empty() || value.numel() == 0) return;  // a tensor this stage does not hold
    if (grad.shape() != value.shape()) {
      OLMO2_THROW(ShapeError, "gradient of ", name, " has the wrong shape");
    }
    Parameter p;
    p.name = std::move(name);
    p.full_shape = std::move(full);
    p.value = &value, p.grad = &grad;
    p.weight_decay = p.name != "model.embed_tokens.weight";
    const bool whole = range.begin == 0 && range.end == p.full_shape[dim < 0 ? 0 : static_cast<size_t>(dim)] &&
                       value.shape() == p.full_shape;
    if (dim >= 0 && !whole) p.shard_dim = dim, p.shard_begin = range.begin, p.shard_end = range.end;
    p.tp_replicated = replicated;
    if (p.name.find(".k_proj.") != std::string::npos || p.name.find(".v_proj.") != std::string::npos ||
        p.name.find(".k_norm.") != std::string::npos) {
      p.kv_replicas = sh.kv_replicas, p.kv_replica = sh.kv_replica;
    }
    out.push_back(std::move(p));
  };
  const int64_t vb = sh.vocab_rows.begin, ve = sh.vocab_rows.end;
  add("model.embed_tokens.weight", w.embed_tokens, g.embed_tokens, {V, h}, 0, {vb, ve}, false);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    LayerWeights& lw = w.layers[i];
    LayerWeights& lg = g.layers[i];
    const std::string p = "model.layers." + std::to_string(sh.global_layer(static_cast<int64_t>(i))) + ".";
    const parallel::Range qr{sh.q_heads.begin * hd, sh.q_heads.end * hd};
    const parallel::Range kr{sh.kv_heads.begin * hd, sh.kv_heads.end * hd};
    const parallel::Range ir = sh.mlp_rows;
    add(p + "self_attn.q_proj.weight", lw.q_proj, lg.q_proj, {q, h}, 0, qr, false);
    add(p + "self_attn.k_proj.weight", lw.k_proj, lg.k_proj, {kv, h}, 0, kr, false);
    add(p + "self_attn.v_proj.weight", lw.v_proj, lg.v_proj, {kv, h}, 0, kr, false);
    add(p + "self_attn.o_proj.weight", lw.o_proj, lg.o_proj, {h, q}, 1, qr, false);
    add(p + "self_attn.q_norm.weight", lw.q_norm, lg.q_norm, {q}, 0, qr, false);
    add(p + "self_attn.k_norm.weight", lw.k_norm, lg.k_norm, {kv}, 0, kr, false);
    add(p + "mlp.gate_proj.weight", lw.gate_proj, lg.gate_proj, {inter, h}, 0, ir, false);
    add(p + "mlp.up_proj.weight", lw.up_proj, lg.up_proj, {inter, h}, 0, ir, false);
    add(p + "mlp.down_proj.weight", lw.down_proj, lg.down_proj, {h, inter}, 1, ir, false);
    add(p + "post_attention_layernorm.weight", lw.post_attention_layernorm, lg.post_attention_layernorm,
        {h}, -1, {0, h}, true);
    add(p + "post_feedforward_layernorm.weight", lw.post_feedforward_layernorm,
        lg.post_feedforward_layernorm, {h}, -1, {0, h}, true);
  }
  add("model.norm.weight", w.norm, g.norm, {h}, -1, {0, h}, true);
  add("lm_head.weight", w.lm_head, g.lm_head, {V, h}, 0, {vb, ve}, false);
  return out;
}

std::vector<std::pair<std::string, TensorView>> hf_named_tensors(ModelWeights& weights, const ModelConfig& config) {
  ModelWeights grads = zeros_like_weights(weights);
  std::vector<std::pair<std::string, TensorView>> out;
  for (const Parameter& p : list_parameters(weights, grads, config, ShardSpec::whole(config))) {
    out.emplace_back(p.name, p.value->view());
  }
  return out;
}

}  // namespace olmo2
