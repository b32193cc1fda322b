#include "runtime/model.h"

#include <cstring>
#include <random>

#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "parallel/tp_qk_norm.h"
#include "runtime/safetensors.h"

namespace olmo2 {

ShardSpec ShardSpec::whole(const ModelConfig& c) {
  ShardSpec s;
  s.layers = {0, c.num_hidden_layers};
  s.q_heads = {0, c.num_attention_heads};
  s.kv_heads = {0, c.num_key_value_heads};
  s.mlp_rows = {0, c.intermediate_size};
  s.vocab_rows = s.vocab_real = {0, c.vocab_size};
  s.padded_vocab = c.vocab_size;
  return s;
}

ShardSpec ShardSpec::from_plan(const parallel::PartitionPlan& plan, int rank) {
  const parallel::RankPartition& r = plan.ranks.at(static_cast<size_t>(rank));
  ShardSpec s;
  s.layers = r.layers, s.q_heads = r.q_heads, s.kv_heads = r.kv_heads, s.mlp_rows = r.mlp_rows;
  s.vocab_rows = r.vocab_rows, s.vocab_real = r.vocab_real;
  s.embedding = r.embedding, s.final_norm = r.final_norm;
  s.k_counts = r.kv_replica == 0;
  s.kv_replicas = r.kv_replicas, s.kv_replica = r.kv_replica;
  s.padded_vocab = plan.padded_vocab;
  return s;
}

KVCache::KVCache(const ModelConfig& c, int64_t capacity) : KVCache(c, ShardSpec::whole(c), capacity) {}

KVCache::KVCache(const ModelConfig& c, const ShardSpec& shard, int64_t capacity) : capacity_(capacity) {
  const int64_t width = shard.kv_heads.size() * c.head_dim;
  for (int64_t l = shard.layers.begin; l < shard.layers.end; ++l) {
    k_.push_back(Tensor::zeros({capacity, width}));
    v_.push_back(Tensor::zeros({capacity, width}));
  }
}

Olmo2Model Olmo2Model::load(const std::string& dir) {
  const ModelConfig c = ModelConfig::load(dir);
  return load(dir, ShardSpec::whole(c));
}

Olmo2Model Olmo2Model::load(const std::string& dir, const ShardSpec& shard) {
  Olmo2Model m;
  m.config_ = ModelConfig::load(dir);
  m.shard_ = shard;
  const ModelConfig& c = m.config_;
  m.act_ = c.dtype == DType::BF16 ? DType::BF16 : DType::F32;
  const Checkpoint ckpt = Checkpoint::open(dir);
  const int64_t h = c.hidden_size, hd = c.head_dim, q = c.num_attention_heads * hd,
                kv = c.num_key_value_heads * hd, inter = c.intermediate_size;
  const int64_t qb = shard.q_heads.begin * hd, qe = shard.q_heads.end * hd;
  const int64_t kb = shard.kv_heads.begin * hd, ke = shard.kv_heads.end * hd;
  const int64_t ib = shard.mlp_rows.begin, ie = shard.mlp_rows.end;
  // Vocab rows: the real rows of this rank's slice, zero rows for padding.
  auto vocab_slice = [&](const std::string& name) {
    if (shard.vocab_real == shard.vocab_rows) {  // no padding rows: no second copy
      return ckpt.load_f32_slice(name, {c.vocab_size, h}, 0, shard.vocab_rows.begin, shard.vocab_rows.end);
    }
    Tensor t = Tensor::zeros({shard.vocab_rows.size(), h});
    if (shard.vocab_real.size() > 0) {
      const Tensor real = ckpt.load_f32_slice(name, {c.vocab_size, h}, 0, shard.vocab_real.begin, shard.vocab_real.end);
      std::memcpy(t.f32() + (shard.vocab_real.begin - shard.vocab_rows.begin) * h, real.f32(),
                  sizeof(float) * static_cast<size_t>(real.numel()));
    }
    return t;
  };
  ModelWeights& w = m.weights_;
  if (shard.embedding || (shard.final_norm && c.tie_word_embeddings)) {
    w.embed_tokens = vocab_slice("model.embed_tokens.weight");
  }
  for (int64_t l = shard.layers.begin; l < shard.layers.end; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.q_proj = ckpt.load_f32_slice(p + "self_attn.q_proj.weight", {q, h}, 0, qb, qe);
    lw.k_proj = ckpt.load_f32_slice(p + "self_attn.k_proj.weight", {kv, h}, 0, kb, ke);
    lw.v_proj = ckpt.load_f32_slice(p + "self_attn.v_proj.weight", {kv, h}, 0, kb, ke);
    lw.o_proj = ckpt.load_f32_slice(p + "self_attn.o_proj.weight", {h, q}, 1, qb, qe);
    lw.q_norm = ckpt.load_f32_slice(p + "self_attn.q_norm.weight", {q}, 0, qb, qe);
    lw.k_norm = ckpt.load_f32_slice(p + "self_attn.k_norm.weight", {kv}, 0, kb, ke);
    lw.gate_proj = ckpt.load_f32_slice(p + "mlp.gate_proj.weight", {inter, h}, 0, ib, ie);
    lw.up_proj = ckpt.load_f32_slice(p + "mlp.up_proj.weight", {inter, h}, 0, ib, ie);
    lw.down_proj = ckpt.load_f32_slice(p + "mlp.down_proj.weight", {h, inter}, 1, ib, ie);
    lw.post_attention_layernorm = ckpt.load_f32(p + "post_attention_layernorm.weight", {h});
    lw.post_feedforward_layernorm = ckpt.load_f32(p + "post_feedforward_layernorm.weight", {h});
    w.layers.push_back(std::move(lw));
  }
  if (shard.final_norm) {
    w.norm = ckpt.load_f32("model.norm.weight", {h});
    if (!c.tie_word_embeddings) w.lm_head = vocab_slice("lm_head.weight");
  }
  return m;
}

Olmo2Model Olmo2Model::from_weights(const ModelConfig& config, const ShardSpec& shard,
                                    ModelWeights weights) {
  Olmo2Model m;
  m.config_ = config;
  m.shard_ = shard;
  m.weights_ = std::move(weights);
  return m;
}

Olmo2Model Olmo2Model::random(const ModelConfig& c, uint64_t seed, float std) {
  Olmo2Model m;
  m.config_ = c;
  m.shard_ = ShardSpec::whole(c);
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
  return forward(tokens, caches, options, ParallelContext{});
}

ForwardResult Olmo2Model::forward(const std::vector<std::span<const int32_t>>& tokens,
                                  const std::vector<KVCache*>& caches, const ForwardOptions& options,
                                  const ParallelContext& ctx) const {
  const ModelConfig& c = config_;
  const ShardSpec& sh = shard_;
  parallel::Communicator* tp = ctx.tp && ctx.tp->size() > 1 ? ctx.tp : nullptr;
  parallel::Communicator* pp = ctx.pp && ctx.pp->size() > 1 ? ctx.pp : nullptr;
  OLMO2_CHECK(tokens.size() == caches.size(), tokens.size(), " sequences but ", caches.size(),
              " caches");
  OLMO2_CHECK((sh.embedding && sh.final_norm) || pp, "a pipeline stage needs a pp communicator");
  const size_t nseq = tokens.size();
  std::vector<int64_t> offset(nseq + 1, 0);
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t n = static_cast<int64_t>(tokens[i].size());
    if (n == 0) OLMO2_THROW(InputError, "sequence ", i, " of the batch is empty");
    if (caches[i]->length() + n > caches[i]->capacity()) {
      OLMO2_THROW(InputError, "sequence ", i, ": ", caches[i]->length(), " cached + ", n,
                  " new tokens exceed the KV cache capacity ", caches[i]->capacity());
    }
    for (int64_t t = 0; t < n; ++t) {
      if (tokens[i][t] < 0 || tokens[i][t] >= c.vocab_size) {
        OLMO2_THROW(InputError, "token id ", tokens[i][t], " at position ", t, " of sequence ", i,
                    " is outside the vocabulary [0, ", c.vocab_size, ")");
      }
    }
    offset[i + 1] = offset[i] + n;
  }
  const int64_t total = offset[nseq];
  const int64_t h = c.hidden_size, hd = c.head_dim, nh = sh.q_heads.size(), nkv = sh.kv_heads.size(),
                qw = nh * hd, kvw = nkv * hd, inter = sh.mlp_rows.size();
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
  if (!sh.embedding) {
    pp->recv(std::span<float>(x.f32(), static_cast<size_t>(x.numel())), pp->rank() - 1, 0);
  } else if (tp) {  // vocab-parallel: each rank fills the rows it holds, one all-reduce
    const TensorView& table = weights_.embed_tokens.view();
    for (int64_t t = 0; t < total; ++t) {
      if (ids[t] >= sh.vocab_rows.begin && ids[t] < sh.vocab_rows.end) {
        std::memcpy(x.f32() + t * h, table.f32() + (ids[t] - sh.vocab_rows.begin) * h, sizeof(float) * h);
      }
    }
    tp->all_reduce_sum(std::span<float>(x.f32(), static_cast<size_t>(x.numel())));
  } else {
    ops::embedding(ids.data(), total, weights_.embed_tokens.view(), x.view());
  }
  Tensor q = Tensor::zeros({total, qw}), k = Tensor::zeros({total, kvw}),
         v = Tensor::zeros({total, kvw}), attn = Tensor::zeros({total, qw}),
         proj = Tensor::zeros({total, h}), gate = Tensor::zeros({total, inter}),
         up = Tensor::zeros({total, inter});
  auto round = [&](const Tensor& t) { round_to_dtype(t.f32(), static_cast<size_t>(t.numel()), act_); };
  auto reduce = [&](const Tensor& t) {
    if (tp) tp->all_reduce_sum(std::span<float>(t.f32(), static_cast<size_t>(t.numel())));
  };

  ForwardResult result;
  for (size_t li = 0; li < weights_.layers.size(); ++li) {
    const LayerWeights& w = weights_.layers[li];
    ops::linear(x.view(), w.q_proj.view(), q.view());
    ops::linear(x.view(), w.k_proj.view(), k.view());
    ops::linear(x.view(), w.v_proj.view(), v.view());
    round(q), round(k), round(v);
    if (tp) {  // whole-projection QK-norm: one [T, 2] all-reduce of sums of squares
      parallel::tp_qk_norm(q.view(), w.q_norm.view(), c.num_attention_heads * hd, k.view(),
                           w.k_norm.view(), c.num_key_value_heads * hd, sh.k_counts, eps, *tp);
    } else {
      ops::rmsnorm(q.view(), w.q_norm.view(), eps, q.view());
      ops::rmsnorm(k.view(), w.k_norm.view(), eps, k.view());
    }
    round(q), round(k);
    ops::rope(q.view(), pos.data(), static_cast<int>(nh), static_cast<int>(hd), theta);
    ops::rope(k.view(), pos.data(), static_cast<int>(nkv), static_cast<int>(hd), theta);
    round(q), round(k);
    for (size_t i = 0; i < nseq; ++i) {
      KVCache& cache = *caches[i];
      const int64_t past = cache.length(), n = offset[i + 1] - offset[i];
      const TensorView kc = cache.keys(static_cast<int64_t>(li)), vc = cache.values(static_cast<int64_t>(li));
      std::memcpy(kc.f32() + past * kvw, k.f32() + offset[i] * kvw, sizeof(float) * n * kvw);
      std::memcpy(vc.f32() + past * kvw, v.f32() + offset[i] * kvw, sizeof(float) * n * kvw);
      ops::causal_attention(q.view().rows(offset[i], offset[i + 1]), kc.rows(0, past + n),
                            vc.rows(0, past + n), static_cast<int>(nh), static_cast<int>(nkv),
                            attn.view().rows(offset[i], offset[i + 1]), act_);
    }
    ops::linear(attn.view(), w.o_proj.view(), proj.view());  // row-parallel: partial sums
    reduce(proj);
    round(proj);
    ops::rmsnorm(proj.view(), w.post_attention_layernorm.view(), eps, proj.view());
    round(proj);
    ops::add_inplace(x.view(), proj.view(), act_);
    ops::linear(x.view(), w.gate_proj.view(), gate.view());
    ops::linear(x.view(), w.up_proj.view(), up.view());
    round(gate), round(up);
    ops::swiglu(gate.view(), up.view(), gate.view(), act_);
    ops::linear(gate.view(), w.down_proj.view(), proj.view());  // row-parallel
    reduce(proj);
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
  if (!sh.final_norm) {
    pp->send(std::span<const float>(x.f32(), static_cast<size_t>(x.numel())), pp->rank() + 1, 0);
    return result;
  }

  ops::rmsnorm(x.view(), weights_.norm.view(), eps, x.view());
  round(x);
  const TensorView head = c.tie_word_embeddings ? weights_.embed_tokens.view() : weights_.lm_head.view();
  const int64_t vl = sh.vocab_rows.size();
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t begin = options.last_logits_only ? offset[i + 1] - 1 : offset[i];
    const int64_t rows = offset[i + 1] - begin;
    Tensor local = Tensor::zeros({rows, vl});
    ops::linear(x.view().rows(begin, offset[i + 1]), head, local.view());
    round(local);
    if (!tp) {
      result.logits.push_back(std::move(local));
      continue;
    }
    // Vocab-parallel lm_head: gather the slices (rank-major), drop the padding rows.
    std::vector<float> all(static_cast<size_t>(tp->size() * rows * vl));
    tp->all_gather(std::span<const float>(local.f32(), static_cast<size_t>(local.numel())), all);
    Tensor logits = Tensor::zeros({rows, c.vocab_size});
    for (int r = 0; r < tp->size(); ++r) {
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t j = 0; j < vl; ++j) {
          const int64_t id = r * vl + j;
          if (id < c.vocab_size) logits.f32()[t * c.vocab_size + id] = all[static_cast<size_t>((r * rows + t) * vl + j)];
        }
      }
    }
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
