// Olmo2Model's forward passes: one shared body (forward_core), with contiguous
// per-sequence KV caches or the paged KV cache.
#include <cstring>

#include "ops/attention.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/paged_attention.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "parallel/tp_qk_norm.h"
#include "runtime/model/model.h"
#include "runtime/model/kv_cache.h"

namespace olmo2 {

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
  OLMO2_CHECK(tokens.size() == caches.size(), tokens.size(), " sequences but ", caches.size(),
              " caches");
  std::vector<int64_t> start(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t n = static_cast<int64_t>(tokens[i].size());
    if (caches[i]->length() + n > caches[i]->capacity()) {
      OLMO2_THROW(InputError, "sequence ", i, ": ", caches[i]->length(), " cached + ", n,
                  " new tokens exceed the KV cache capacity ", caches[i]->capacity());
    }
    start[i] = caches[i]->length();
  }
  const int64_t kvw = shard_.kv_heads.size() * config_.head_dim;
  const int nh = static_cast<int>(shard_.q_heads.size()), nkv = static_cast<int>(shard_.kv_heads.size());
  auto attend = [&](size_t li, const std::vector<int64_t>& offset, const TensorView& q, const TensorView& k,
                    const TensorView& v, const TensorView& out) {
    for (size_t i = 0; i < caches.size(); ++i) {
      KVCache& cache = *caches[i];
      const int64_t past = cache.length(), n = offset[i + 1] - offset[i];
      const TensorView kc = cache.keys(static_cast<int64_t>(li)), vc = cache.values(static_cast<int64_t>(li));
      std::memcpy(kc.f32() + past * kvw, k.f32() + offset[i] * kvw, sizeof(float) * n * kvw);
      std::memcpy(vc.f32() + past * kvw, v.f32() + offset[i] * kvw, sizeof(float) * n * kvw);
      ops::causal_attention(q.rows(offset[i], offset[i + 1]), kc.rows(0, past + n), vc.rows(0, past + n), nh,
                            nkv, out.rows(offset[i], offset[i + 1]), act_);
    }
  };
  ForwardResult r = forward_core(tokens, start, attend, options, ctx);
  for (size_t i = 0; i < caches.size(); ++i) {
    caches[i]->set_length(caches[i]->length() + static_cast<int64_t>(tokens[i].size()));
  }
  return r;
}

ForwardResult Olmo2Model::forward_paged(const PagedBatch& batch, const PagedKVCache& cache,
                                        const ForwardOptions& options, const ParallelContext& ctx) const {
  const size_t nseq = batch.tokens.size();
  OLMO2_CHECK(batch.start.size() == nseq && batch.block_tables.size() == nseq, "paged batch of ", nseq,
              " sequences with ", batch.start.size(), " starts and ", batch.block_tables.size(), " block tables");
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t end = batch.start[i] + static_cast<int64_t>(batch.tokens[i].size());
    OLMO2_CHECK(batch.start[i] >= 0 && blocks_for(end, cache.block_size()) <=
                                          static_cast<int64_t>(batch.block_tables[i].size()),
                "sequence ", i, ": ", batch.block_tables[i].size(), " blocks of ", cache.block_size(),
                " cannot hold ", end, " positions");
    if (end > config_.max_position_embeddings) {
      OLMO2_THROW(InputError, "sequence ", i, " reaches position ", end, " beyond the context length ",
                  config_.max_position_embeddings);
    }
  }
  const int nh = static_cast<int>(shard_.q_heads.size()), nkv = static_cast<int>(shard_.kv_heads.size());
  auto attend = [&](size_t li, const std::vector<int64_t>& offset, const TensorView& q, const TensorView& k,
                    const TensorView& v, const TensorView& out) {
    std::vector<ops::PagedSequence> seqs(nseq);
    for (size_t i = 0; i < nseq; ++i) {
      cache.write(static_cast<int64_t>(li), batch.block_tables[i], batch.start[i], k.rows(offset[i], offset[i + 1]),
                  v.rows(offset[i], offset[i + 1]));
      seqs[i] = {offset[i], offset[i + 1] - offset[i], batch.start[i], batch.block_tables[i]};
    }
    ops::paged_attention(q, cache.keys(static_cast<int64_t>(li)), cache.values(static_cast<int64_t>(li)),
                         cache.block_size(), seqs, nh, nkv, out, act_);
  };
  return forward_core(batch.tokens, batch.start, attend, options, ctx);
}

ForwardResult Olmo2Model::forward_core(const std::vector<std::span<const int32_t>>& tokens,
                                       const std::vector<int64_t>& start, const AttendFn& attend,
                                       const ForwardOptions& options, const ParallelContext& ctx) const {
  const ModelConfig& c = config_;
  const ShardSpec& sh = shard_;
  parallel::Communicator* tp = ctx.tp && ctx.tp->size() > 1 ? ctx.tp : nullptr;
  parallel::Communicator* pp = ctx.pp && ctx.pp->size() > 1 ? ctx.pp : nullptr;
  OLMO2_CHECK((sh.embedding && sh.final_norm) || pp, "a pipeline stage needs a pp communicator");
  const auto linear = options.batch_invariant ? ops::linear_batch_invariant : ops::linear;
  const size_t nseq = tokens.size();
  std::vector<int64_t> offset(nseq + 1, 0);
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t n = static_cast<int64_t>(tokens[i].size());
    if (n == 0) OLMO2_THROW(InputError, "sequence ", i, " of the batch is empty");
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
      pos[offset[i] + t] = static_cast<int32_t>(start[i] + t);
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
    linear(x.view(), w.q_proj.view(), q.view());
    linear(x.view(), w.k_proj.view(), k.view());
    linear(x.view(), w.v_proj.view(), v.view());
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
    attend(li, offset, q.view(), k.view(), v.view(), attn.view());
    linear(attn.view(), w.o_proj.view(), proj.view());  // row-parallel: partial sums
    reduce(proj);
    round(proj);
    ops::rmsnorm(proj.view(), w.post_attention_layernorm.view(), eps, proj.view());
    round(proj);
    ops::add_inplace(x.view(), proj.view(), act_);
    linear(x.view(), w.gate_proj.view(), gate.view());
    linear(x.view(), w.up_proj.view(), up.view());
    round(gate), round(up);
    ops::swiglu(gate.view(), up.view(), gate.view(), act_);
    linear(gate.view(), w.down_proj.view(), proj.view());  // row-parallel
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
  if (!sh.final_norm) {
    pp->send(std::span<const float>(x.f32(), static_cast<size_t>(x.numel())), pp->rank() + 1, 0);
    return result;
  }
  ops::rmsnorm(x.view(), weights_.norm.view(), eps, x.view());
  round(x);
  const TensorView head = c.tie_word_embeddings ? weights_.embed_tokens.view() : weights_.lm_head.view();
  const int64_t vl = sh.vocab_rows.size();
  // The rows that get logits, packed: each sequence's last row, or all of them.
  Tensor last;
  TensorView rows_in = x.view();
  if (options.last_logits_only) {
    last = Tensor::zeros({static_cast<int64_t>(nseq), h});
    for (size_t i = 0; i < nseq; ++i) {
      std::memcpy(last.f32() + static_cast<int64_t>(i) * h, x.f32() + (offset[i + 1] - 1) * h, sizeof(float) * h);
    }
    rows_in = last.view();
  }
  Tensor local = Tensor::zeros({rows_in.size(0), vl});
  linear(rows_in, head, local.view());
  round(local);
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t begin = options.last_logits_only ? static_cast<int64_t>(i) : offset[i];
    const int64_t rows = options.last_logits_only ? 1 : offset[i + 1] - offset[i];
    Tensor mine = Tensor::zeros({rows, vl});
    std::memcpy(mine.f32(), local.f32() + begin * vl, sizeof(float) * static_cast<size_t>(rows * vl));
    if (!tp || options.vocab_parallel_logits) {
      result.logits.push_back(std::move(mine));
      continue;
    }
    // Vocab-parallel lm_head: gather the slices (rank-major), drop the padding rows.
    std::vector<float> all(static_cast<size_t>(tp->size() * rows * vl));
    tp->all_gather(std::span<const float>(mine.f32(), static_cast<size_t>(mine.numel())), all);
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

}  // namespace olmo2
