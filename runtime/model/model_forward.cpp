// Olmo2Model's forward: the stage input (embedding or the previous stage's rows), the
// decoder layers, and on the last stage the final norm and lm_head.
#include <cmath>

#include "ops/batch_invariant_gemm.h"
#include "ops/gemm.h"
#include "ops/quantized_linear.h"
#include "ops/rmsnorm.h"
#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"
#include "parallel/vocab_parallel.h"
#include "runtime/model/model.h"

namespace olmo2 {
namespace {
constexpr int kStageTag = 0;  // hidden states, stage s → s + 1
}  // namespace

ForwardResult Olmo2Model::forward(const std::vector<std::vector<int32_t>>& batch, const ForwardOptions& options,
                                  const ParallelContext& ctx) const {
  TokenBatch b;
  for (const auto& s : batch) b.tokens.emplace_back(s);
  return forward(b, nullptr, options, ctx);
}

Tensor Olmo2Model::stage_input(const PackedTokens& packed, const ParallelContext& ctx) const {
  Tensor x = Tensor::zeros({packed.rows(), config_.hidden_size}, DType::F32, device_);
  if (!shard_.embedding) {
    parallel::Communicator* pp = ctx.pipeline();
    OLMO2_CHECK(pp, "a pipeline stage without the embedding needs a pp communicator");
    parallel::recv(*pp, x.view(), pp->rank() - 1, kStageTag);
  } else {
    parallel::vocab_parallel_embedding(packed.ids.view(), weights_.embed_tokens.view(), shard_.vocab_rows.begin,
                                       x.view(), ctx.tensor_parallel());
  }
  return x;
}

void Olmo2Model::forward_layers(const PackedTokens& packed, const KVCacheBinding* kv, const LayerOptions& options,
                                const TensorView& x, const ParallelContext& ctx, std::vector<LayerActivations>* saved,
                                std::vector<LayerStats>* stats, std::vector<Tensor>* hidden) const {
  const size_t layers = weights_.layers.size();
  OLMO2_CHECK(!saved || saved->size() == layers, "activations for ", saved ? saved->size() : 0, " layers, the stage has ",
              layers);
  OLMO2_CHECK(!stats || stats->size() == layers, "statistics for ", stats ? stats->size() : 0,
              " layers, the stage has ", layers);
  const LayerContext lc = layer_context(ctx);
  LayerWorkspace ws;
  for (size_t l = 0; l < layers; ++l) {
    decoder_layer_forward(lc, weights_.layers[l], static_cast<int64_t>(l), packed, kv, options, x, ws,
                          saved ? &(*saved)[l] : nullptr, stats ? &(*stats)[l] : nullptr);
    if (hidden) {
      hidden->push_back(Tensor::zeros(x.shape(), DType::F32, x.device()));
      ops::copy(x, hidden->back().view());
    }
  }
}

ForwardResult Olmo2Model::forward(const TokenBatch& batch, const KVCache* cache, const ForwardOptions& options,
                                  const ParallelContext& ctx) const {
  const ModelConfig& c = config_;
  const ShardSpec& sh = shard_;
  parallel::Communicator* tp = ctx.tensor_parallel();
  parallel::Communicator* pp = ctx.pipeline();
  OLMO2_CHECK((sh.embedding && sh.final_norm) || pp, "a pipeline stage needs a pp communicator");
  OLMO2_CHECK(cache || batch.block_tables.empty(), "block tables without a KV cache");
  OLMO2_CHECK(!cache || cache->device() == device_, "a KV cache on ", device_name(cache->device()), " for a model on ",
              device_name(device_));
  const PackedTokens packed = pack_tokens(batch, c, device_);
  KVCacheBinding kv;
  if (cache) {
    kv = bind_kv_cache(*cache, packed, batch.block_tables);
  } else {
    for (int64_t s : packed.start) OLMO2_CHECK(s == 0, "a forward without a KV cache starts at position 0, got ", s);
  }
  const size_t nseq = packed.sequences();
  const int64_t h = c.hidden_size;
  Tensor x = stage_input(packed, ctx);
  ForwardTap* const tap = options.tap;  // named activations (docs/architecture.md §13)
  const TapRows where = tap ? TapRows{packed.offset, packed.start} : TapRows{};
  if (tap && sh.embedding && tap->wants(TapSite::TokenEmbeddings, -1)) {
    tap->at(TapSite::TokenEmbeddings, -1, where, x.view());
  }
  ForwardResult result;
  std::vector<Tensor> hidden;
  const DType act = activation_dtype();
  const LayerOptions lo{act, options.batch_invariant, tap};
  forward_layers(packed, cache ? &kv : nullptr, lo, x.view(), ctx, nullptr, nullptr,
                 options.return_hidden ? &hidden : nullptr);
  for (const Tensor& layer_out : hidden) {  // per layer, per sequence
    std::vector<Tensor> per_seq;
    for (size_t i = 0; i < nseq; ++i) {
      per_seq.push_back(Tensor::zeros({packed.offset[i + 1] - packed.offset[i], h}, DType::F32, device_));
      ops::copy(packed.rows_of(layer_out.view(), i), per_seq.back().view());
    }
    result.hidden.push_back(std::move(per_seq));
  }
  if (!sh.final_norm) {
    parallel::send(*pp, x.view(), pp->rank() + 1, kStageTag);
    return result;
  }
  // Σx² of the residual rows before the final norm: a finite row too large to square
  // (|x| > 1.8e19) would be normalized to zeros and give uniform logits, not a NaN.
  std::vector<float> residual_sumsq;
  if (options.check_finite) {
    Tensor sumsq = Tensor::zeros({x.view().size(0)}, DType::F32, device_);
    ops::rmsnorm_partials(x.view(), sumsq.view());
    residual_sumsq.resize(static_cast<size_t>(x.view().size(0)));
    ops::copy(sumsq.view(), host_view(residual_sumsq));
  }
  const float eps = static_cast<float>(c.rms_norm_eps);
  ops::rmsnorm(x.view(), weights_.norm.view(), eps, x.view());
  if (act != DType::F32) ops::round_to(x.view(), act);
  if (tap && tap->wants(TapSite::FinalNormOutput, -1)) tap->at(TapSite::FinalNormOutput, -1, where, x.view());
  const TensorView head = c.tie_word_embeddings ? weights_.embed_tokens.view() : weights_.lm_head.view();
  // The rows that get logits: each sequence's last row (all its rows with all_logits), or
  // all of them. first[i]: sequence i's first row among them.
  OLMO2_CHECK(options.all_logits.empty() || options.all_logits.size() == nseq, "all_logits for ",
              options.all_logits.size(), " sequences, the batch has ", nseq);
  auto every_row = [&](size_t i) {
    return !options.last_logits_only || (!options.all_logits.empty() && options.all_logits[i]);
  };
  std::vector<int64_t> first(nseq + 1, 0);
  for (size_t i = 0; i < nseq; ++i) {
    first[i + 1] = first[i] + (every_row(i) ? packed.offset[i + 1] - packed.offset[i] : 1);
  }
  Tensor last;
  TensorView rows_in = x.view();
  if (options.last_logits_only) {
    std::vector<int32_t> rows;  // made on the host, copied to the model's device
    for (size_t i = 0; i < nseq; ++i) {
      for (int64_t r = every_row(i) ? packed.offset[i] : packed.offset[i + 1] - 1; r < packed.offset[i + 1]; ++r) {
        rows.push_back(static_cast<int32_t>(r));
      }
    }
    Tensor index = Tensor::zeros({first[nseq]}, DType::I32, device_);
    ops::copy(host_view(rows), index.view());
    last = Tensor::zeros({first[nseq], h}, DType::F32, device_);
    ops::gather_rows(x.view(), index.view(), last.view());
    rows_in = last.view();
  }
  if (options.check_finite) {
    // Σx² of each normalized row is finite exactly when the row is (an overflow of the
    // square needs |x| > 1.8e19: no normalized row gets there).
    Tensor sumsq = Tensor::zeros({rows_in.size(0)}, DType::F32, device_);
    ops::rmsnorm_partials(rows_in, sumsq.view());
    std::vector<float> host(static_cast<size_t>(rows_in.size(0)));
    ops::copy(sumsq.view(), host_view(host));
    result.nonfinite.assign(nseq, 0);
    for (size_t i = 0; i < nseq; ++i) {
      for (int64_t r = first[i]; r < first[i + 1]; ++r) {  // its rows of rows_in
        if (!std::isfinite(host[static_cast<size_t>(r)])) result.nonfinite[i] = 1;
      }
      const int64_t end = packed.offset[i + 1], begin = every_row(i) ? packed.offset[i] : end - 1;
      for (int64_t r = begin; r < end; ++r) {  // the same rows of the residual, before the norm
        if (!std::isfinite(residual_sumsq[static_cast<size_t>(r)])) result.nonfinite[i] = 1;
      }
    }
  }
  const int64_t vl = sh.vocab_rows.size();
  Tensor local = Tensor::zeros({rows_in.size(0), vl}, DType::F32, device_);
  if (!weights_.lm_head_quantized.empty()) {  // docs/architecture.md §3.2 "Quantized weights"
    ops::linear_quantized(rows_in, weights_.lm_head_quantized, local.view());
  } else {
    (options.batch_invariant ? ops::linear_batch_invariant : ops::linear)(rows_in, head, local.view());
  }
  if (act != DType::F32) ops::round_to(local.view(), act);
  if (tap && tap->wants(TapSite::LmHeadOutput, -1)) {  // the rows that got logits, this rank's vocab rows
    TapRows logit_rows{first, {}};
    for (size_t i = 0; i < nseq; ++i) {
      const int64_t n = packed.offset[i + 1] - packed.offset[i];
      logit_rows.first_position.push_back(packed.start[i] + (every_row(i) ? 0 : n - 1));
    }
    tap->at(TapSite::LmHeadOutput, -1, logit_rows, local.view());
  }
  // Vocab-parallel lm_head: gather the slices (rank-major), drop the padding rows.
  const Tensor whole = tp && !options.vocab_parallel_logits ? parallel::gather_vocab_parallel_logits(local.view(), c.vocab_size, *tp)
                                                            : Tensor();
  const TensorView all = whole.empty() ? local.view() : whole.view();
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t begin = first[i], rows = first[i + 1] - first[i];
    Tensor mine = Tensor::zeros({rows, all.size(1)}, DType::F32, device_);
    ops::copy(all.rows(begin, begin + rows), mine.view());
    result.logits.push_back(std::move(mine));
  }
  return result;
}

}  // namespace olmo2
