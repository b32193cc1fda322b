#include "runtime/model.h"

#include <cstring>
#include <random>

#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "runtime/safetensors.h"

namespace olmo2 {

KVCache::KVCache(const ModelConfig& c, int64_t capacity) : capacity_(capacity) {
  const int64_t width = c.num_key_value_heads * c.head_dim;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    k_.push_back(Tensor::zeros({capacity, width}));
    v_.push_back(Tensor::zeros({capacity, width}));
  }
}

Olmo2Model Olmo2Model::load(const std::string& dir) {
  Olmo2Model m;
  m.config_ = ModelConfig::load(dir);
  const ModelConfig& c = m.config_;
  m.act_ = c.dtype == DType::BF16 ? DType::BF16 : DType::F32;
  const Checkpoint ckpt = Checkpoint::open(dir);
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, inter = c.intermediate_size;
  ModelWeights& w = m.weights_;
  w.embed_tokens = ckpt.load_f32("model.embed_tokens.weight", {c.vocab_size, h});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.q_proj = ckpt.load_f32(p + "self_attn.q_proj.weight", {q, h});
    lw.k_proj = ckpt.load_f32(p + "self_attn.k_proj.weight", {kv, h});
    lw.v_proj = ckpt.load_f32(p + "self_attn.v_proj.weight", {kv, h});
    lw.o_proj = ckpt.load_f32(p + "self_attn.o_proj.weight", {h, q});
    lw.q_norm = ckpt.load_f32(p + "self_attn.q_norm.weight", {q});
    lw.k_norm = ckpt.load_f32(p + "self_attn.k_norm.weight", {kv});
    lw.gate_proj = ckpt.load_f32(p + "mlp.gate_proj.weight", {inter, h});
    lw.up_proj = ckpt.load_f32(p + "mlp.up_proj.weight", {inter, h});
    lw.down_proj = ckpt.load_f32(p + "mlp.down_proj.weight", {h, inter});
    lw.post_attention_layernorm = ckpt.load_f32(p + "post_attention_layernorm.weight", {h});
    lw.post_feedforward_layernorm = ckpt.load_f32(p + "post_feedforward_layernorm.weight", {h});
    w.layers.push_back(std::move(lw));
  }
  w.norm = ckpt.load_f32("model.norm.weight", {h});
  if (!c.tie_word_embeddings) w.lm_head = ckpt.load_f32("lm_head.weight", {c.vocab_size, h});
  return m;
}

Olmo2Model Olmo2Model::random(const ModelConfig& c, uint64_t seed, float std) {
  Olmo2Model m;
  m.config_ = c;
  std::mt19937_64 rng(seed);
  auto normal = [&](std::vector<int64_t> shape) {
    Tensor t = Tensor::zeros(std::move(shape));
    std::normal_distribution<float> dist(0.0f, std);
    float* p = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
    return t;
  };
  auto ones = [](int64_t n) {
    Tensor t = Tensor::zeros({n});
    for (int64_t i = 0; i < n; ++i) t.f32()[i] = 1.0f;
    return t;
  };
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, inter = c.intermediate_size;
  ModelWeights& w = m.weights_;
  w.embed_tokens = normal({c.vocab_size, h});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights lw{normal({q, h}), normal({kv, h}), normal({kv, h}), normal({h, q}),
                    ones(q), ones(kv), normal({inter, h}), normal({inter, h}),
                    normal({h, inter}), ones(h), ones(h)};
    w.layers.push_back(std::move(lw));
  }
  w.norm = ones(h);
  if (!c.tie_word_embeddings) w.lm_head = normal({c.vocab_size, h});
  return m;
}

ForwardResult Olmo2Model::forward(const std::vector<std::vector<int32_t>>& batch,
                                  const ForwardOptions& options) const {
  std::vector<std::span<const int32_t>> spans;
  std::vector<KVCache> caches;
  std::vector<KVCache*> ptrs;
  caches.reserve(batch.size());
  for (const auto& s : batch) {
    spans.emplace_back(s);
    caches.emplace_back(config_, static_cast<int64_t>(s.size()));
  }
  for (auto& c : caches) ptrs.push_back(&c);
  return forward(spans, ptrs, options);
}

ForwardResult Olmo2Model::forward(const std::vector<std::span<const int32_t>>& tokens,
                                  const std::vector<KVCache*>& caches,
                                  const ForwardOptions& options) const {
  const ModelConfig& c = config_;
  OLMO2_CHECK(tokens.size() == caches.size(), tokens.size(), " sequences but ", caches.size(),
              " caches");
  const size_t nseq = tokens.size();
  std::vector<int64_t> offset(nseq + 1, 0);
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t n = static_cast<int64_t>(tokens[i].size());
    if (n == 0) OLMO2_THROW(InputError, "sequence ", i, " of the batch is empty");
    if (caches[i]->length() + n > caches[i]->capacity()) {
      OLMO2_THROW(InputError, "sequence ", i, ": ", caches[i]->length(), " cached + ", n,
                  " new tokens exceed the KV cache capacity ", caches[i]->capacity());
    }
    offset[i + 1] = offset[i] + n;
  }
  const int64_t total = offset[nseq];
  const int64_t h = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads,
                nkv = c.num_key_value_heads, qw = nh * hd, kvw = nkv * hd,
                inter = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float theta = static_cast<float>(c.rope_theta);

  std::vector<int32_t> ids(static_cast<size_t>(total)), pos(static_cast<size_t>(total));
  for (size_t i = 0; i < nseq; ++i) {
    for (int64_t t = 0; t < offset[i + 1] - offset[i]; ++t) {
      ids[offset[i] + t] = tokens[i][t];
      pos[offset[i] + t] = static_cast<int32_t>(caches[i]->length() + t);
    }
  }

  Tensor x = Tensor::zeros({total, h});
  ops::embedding(ids.data(), total, weights_.embed_tokens.view(), x.view());
  Tensor q = Tensor::zeros({total, qw}), k = Tensor::zeros({total, kvw}),
         v = Tensor::zeros({total, kvw}), attn = Tensor::zeros({total, qw}),
         proj = Tensor::zeros({total, h}), gate = Tensor::zeros({total, inter}),
         up = Tensor::zeros({total, inter});
  auto round = [&](const Tensor& t) { round_to_dtype(t.f32(), static_cast<size_t>(t.numel()), act_); };

  ForwardResult result;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    ops::linear(x.view(), w.q_proj.view(), q.view());
    ops::linear(x.view(), w.k_proj.view(), k.view());
    ops::linear(x.view(), w.v_proj.view(), v.view());
    round(q), round(k), round(v);
    ops::rmsnorm(q.view(), w.q_norm.view(), eps, q.view());  // whole-projection QK-norm
    ops::rmsnorm(k.view(), w.k_norm.view(), eps, k.view());
    round(q), round(k);
    ops::rope(q.view(), pos.data(), static_cast<int>(nh), static_cast<int>(hd), theta);
    ops::rope(k.view(), pos.data(), static_cast<int>(nkv), static_cast<int>(hd), theta);
    round(q), round(k);
    for (size_t i = 0; i < nseq; ++i) {
      KVCache& cache = *caches[i];
      const int64_t past = cache.length(), n = offset[i + 1] - offset[i];
      const TensorView kc = cache.keys(l), vc = cache.values(l);
      std::memcpy(kc.f32() + past * kvw, k.f32() + offset[i] * kvw, sizeof(float) * n * kvw);
      std::memcpy(vc.f32() + past * kvw, v.f32() + offset[i] * kvw, sizeof(float) * n * kvw);
      ops::causal_attention(q.view().rows(offset[i], offset[i + 1]), kc.rows(0, past + n),
                            vc.rows(0, past + n), static_cast<int>(nh), static_cast<int>(nkv),
                            attn.view().rows(offset[i], offset[i + 1]), act_);
    }
    ops::linear(attn.view(), w.o_proj.view(), proj.view());
    round(proj);
    ops::rmsnorm(proj.view(), w.post_attention_layernorm.view(), eps, proj.view());
    round(proj);
    ops::add_inplace(x.view(), proj.view(), act_);
    ops::linear(x.view(), w.gate_proj.view(), gate.view());
    ops::linear(x.view(), w.up_proj.view(), up.view());
    round(gate), round(up);
    ops::swiglu(gate.view(), up.view(), gate.view(), act_);
    ops::linear(gate.view(), w.down_proj.view(), proj.view());
    round(proj);
    ops::rmsnorm(proj.view(), w.post_feedforward_layernorm.view(), eps, proj.view());
    round(proj);
    ops::add_inplace(x.view(), proj.view(), act_);
    if (options.return_hidden) {
      std::vector<Tensor> per_seq;
      for (size_t i = 0; i < nseq; ++i) {
        Tensor hs = Tensor::zeros({offset[i + 1] - offset[i], h});
        std::memcpy(hs.f32(), x.f32() + offset[i] * h, sizeof(float) * hs.numel());
        per_seq.push_back(std::move(hs));
      }
      result.hidden.push_back(std::move(per_seq));
    }
  }
  for (size_t i = 0; i < nseq; ++i) caches[i]->set_length(caches[i]->length() + offset[i + 1] - offset[i]);

  ops::rmsnorm(x.view(), weights_.norm.view(), eps, x.view());
  round(x);
  const TensorView head = c.tie_word_embeddings ? weights_.embed_tokens.view() : weights_.lm_head.view();
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t begin = options.last_logits_only ? offset[i + 1] - 1 : offset[i];
    Tensor logits = Tensor::zeros({offset[i + 1] - begin, c.vocab_size});
    ops::linear(x.view().rows(begin, offset[i + 1]), head, logits.view());
    round(logits);
    result.logits.push_back(std::move(logits));
  }
  return result;
}

double Olmo2Model::forward_flops(int64_t tokens, double context) const {
  const ModelConfig& c = config_;
  const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.num_attention_heads * c.head_dim),
               kv = static_cast<double>(c.num_key_value_heads * c.head_dim),
               inter = static_cast<double>(c.intermediate_size);
  const double matmul_params = c.num_hidden_layers * (2 * h * q + 2 * h * kv + 3 * h * inter) +
                               static_cast<double>(c.vocab_size) * h;
  const double attention = c.num_hidden_layers * 4.0 * context * q;
  return static_cast<double>(tokens) * (2.0 * matmul_params + attention);
}

}  // namespace olmo2
