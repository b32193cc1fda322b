#include "runtime/train/train_step.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/backward.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"
#include "parallel/vocab_parallel.h"
#include "parallel/vocab_parallel_loss.h"
#include "runtime/model/ring_attention.h"

namespace olmo2 {
namespace {

/// The micro-batch's rows (ids, positions from 0, sequence offsets) and targets.
struct Batch {
  PackedTokens packed;
  Tensor targets;  ///< [T] i32
};

/// A copy of `t` on `device` (the tensor itself when it is there already).
Tensor on_device(Tensor t, Device device) {
  if (t.device() == device) return t;
  Tensor d = Tensor::zeros(t.shape(), t.dtype(), device);
  ops::copy(t.view(), d.view());
  return d;
}

/// Context parallelism: `b` becomes CP rank cp.rank()'s zigzag rows of `samples`
/// (zigzag_shard of their lengths): per sequence its two chunks, with their ids, targets
/// and their positions in the whole sequence, for RoPE (docs/architecture.md §7 "Context
/// parallelism"). InputError (zigzag_shard's) for a length not divisible by 2 · cp.
void keep_context_rows(Batch& b, const std::vector<Sample>& samples, const parallel::Communicator& cp) {
  std::vector<int64_t> lengths;
  for (const Sample& s : samples) lengths.push_back(static_cast<int64_t>(s.input_ids.size()));
  auto shard = std::make_shared<ContextShard>(zigzag_shard(lengths, cp.size()));
  const size_t j = static_cast<size_t>(cp.rank());
  const int64_t n = shard->rows(cp.rank());
  std::vector<int32_t> ids(n), positions(n), targets(n);
  std::vector<int64_t> offset(samples.size() + 1, 0);
  for (int64_t r = 0; r < n; ++r) {
    const int32_t s = shard->seq[j][r], p = shard->pos[j][r];
    ids[r] = samples[s].input_ids[p], targets[r] = samples[s].labels[p], positions[r] = p;
    ++offset[s + 1];
  }
  for (size_t i = 0; i < samples.size(); ++i) offset[i + 1] += offset[i];
  auto host = [&](std::vector<int32_t>& v) {
    Tensor t = Tensor::zeros({n}, DType::I32);
    ops::copy(TensorView(v.data(), DType::I32, {n}), t.view());
    return t;
  };
  b.packed.offset = std::move(offset), b.packed.start.assign(samples.size(), 0);
  b.packed.ids = host(ids), b.packed.positions = host(positions), b.targets = host(targets);
  b.packed.context = std::move(shard);
}

/// Packs and checks on the host, then copies the i32 ids, positions and targets to
/// `device` (the data loader stays on the host: docs/architecture.md §2). With `cp`
/// (more than one rank) only this CP rank's rows (keep_context_rows).
Batch pack(const std::vector<Sample>& samples, const ModelConfig& c, Device device, parallel::Communicator* cp) {
  TokenBatch tb;
  std::vector<int32_t> targets;
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if (s.input_ids.empty()) OLMO2_THROW(InputError, "sample ", i, " of the micro-batch is empty");
    if (s.labels.size() != s.input_ids.size()) {
      OLMO2_THROW(InputError, "sample ", i, " has ", s.input_ids.size(), " input ids but ", s.labels.size(), " labels");
    }
    for (size_t t = 0; t < s.input_ids.size(); ++t) {
      const int32_t id = s.input_ids[t], label = s.labels[t];
      if (id < 0 || id >= c.vocab_size) {
        OLMO2_THROW(InputError, "token id ", id, " at position ", t, " of sample ", i,
                    " is outside the vocabulary [0, ", c.vocab_size, ")");
      }
      if (label != kIgnoreIndex && (label < 0 || label >= c.vocab_size)) {
        OLMO2_THROW(InputError, "label ", label, " at position ", t, " of sample ", i, " is neither -100 nor in [0, ",
                    c.vocab_size, ")");
      }
    }
    tb.tokens.emplace_back(s.input_ids);
    targets.insert(targets.end(), s.labels.begin(), s.labels.end());
  }
  Batch b;
  b.packed = pack_tokens(tb, c);
  b.targets = Tensor::zeros({b.packed.rows()}, DType::I32, device);
  ops::copy(TensorView(targets.data(), DType::I32, {b.packed.rows()}), b.targets.view());
  if (cp) keep_context_rows(b, samples, *cp);
  b.targets = on_device(std::move(b.targets), device);
  b.packed.ids = on_device(std::move(b.packed.ids), device);
  b.packed.positions = on_device(std::move(b.packed.positions), device);
  return b;
}

void check_stage(const Olmo2Model& model, const ParallelContext& ctx) {
  const ModelConfig& c = model.config();
  const ShardSpec& sh = model.shard();
  const bool staged = !(sh.embedding && sh.final_norm);
  OLMO2_CHECK(!staged || ctx.pipeline(), "a pipeline-stage shard needs ctx.pp");
  OLMO2_CHECK(ctx.tensor_parallel() || sh.q_heads.size() == c.num_attention_heads,
              "a tensor-parallel shard needs ctx.tp");
  if (c.tie_word_embeddings && staged) {
    OLMO2_THROW(InputError, "training a model with tie_word_embeddings over ", ctx.pp->size(),
                " pipeline stages is not supported (the embedding and lm_head live on different stages)");
  }
}

}  // namespace

struct StageActivations {
  Batch b;
  int model_chunk = 0;                    ///< which of the rank's model chunks ran (ShardSpec::chunks)
  std::vector<LayerActivations> layers;  ///< that chunk's layers, in order
  Tensor dx_top;  ///< last stage: d(loss)/d(output of its last layer), from the forward
};

void LayerDiagnostics::reset(size_t layers) {
  output_norm_sum.assign(layers, 0.0), attention_norm_sum.assign(layers, 0.0), mlp_norm_sum.assign(layers, 0.0);
  attention_logit_max.assign(layers, -std::numeric_limits<float>::infinity());
  tokens = 0;
}

StageForward stage_forward(const Olmo2Model& model, ModelWeights* grads, const std::vector<Sample>& samples,
                           const Tensor& input, float z_coef, float scale, int64_t chunk,
                           const ParallelContext& ctx, LayerDiagnostics* diag, Recompute recompute,
                           UnitHooks* hooks, int model_chunk) {
  check_stage(model, ctx);
  OLMO2_CHECK(chunk > 0, "loss chunk ", chunk);
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const ShardSpec& sh = model.shard();
  parallel::Communicator* tp = ctx.tensor_parallel();
  // every tensor of the step lives beside the weights
  const Device dev = hooks ? hooks->device() : weights_device(model);
  const int tail = static_cast<int>(w.layers.size()) + 1;  // the UnitHooks number of the final norm and lm_head
  // The chunk's local layers; the embedding runs before chunk 0 of the first stage, the
  // tail after the last chunk of the last stage (docs/architecture.md §5 "Interleaved 1F1B").
  const parallel::Range mine = sh.chunk_locals(model_chunk);
  const bool first_chunk = model_chunk == 0, last_chunk = static_cast<size_t>(model_chunk) + 1 == sh.chunks.size();
  StageActivationsPtr saved(new StageActivations);
  saved->model_chunk = model_chunk;
  saved->b = pack(samples, c, dev, ctx.context_parallel());
  const Batch& b = saved->b;
  const int64_t n = b.packed.rows(), h = c.hidden_size;

  // ---- this stage's input: the embedding (stage 0) or the previous stage's output ----
  Tensor x;
  if (sh.embedding && first_chunk) {
    x = Tensor::zeros({n, h}, DType::F32, dev);
    if (hooks) hooks->before_forward(0);
    parallel::vocab_parallel_embedding(b.packed.ids.view(), w.embed_tokens.view(), sh.vocab_rows.begin, x.view(), tp);
    if (hooks) hooks->after_forward(0);
  } else {
    if (input.shape() != std::vector<int64_t>{n, h}) {
      OLMO2_THROW(ShapeError, "stage input has shape ", shape_to_string(input.shape()), ", expected [", n, ", ", h,
                  "] for this micro-batch");
    }
    x = Tensor::zeros({n, h}, DType::F32, dev);
    ops::copy(input.view(), x.view());
  }
  // ---- the stage's layers (training computes in f32), keeping activations ----
  const size_t count = static_cast<size_t>(mine.size());
  std::vector<LayerStats> stats(diag ? count : 0);
  if (diag) {
    OLMO2_CHECK(diag->output_norm_sum.size() == w.layers.size(), "diagnostics sized for ",
                diag->output_norm_sum.size(), " layers, the stage has ", w.layers.size());
    if (first_chunk) diag->tokens += n;
  }
  if (grads) saved->layers.resize(count);
  const DType act = model.activation_dtype();  // bf16 precision: bf16-valued activations
  const LayerOptions lo{act, false, nullptr, recompute};
  const LayerContext lc = model.layer_context(ctx);
  LayerWorkspace ws;
  for (size_t i = 0; i < count; ++i) {  // with hooks each layer's weights are present only around its forward
    const size_t l = static_cast<size_t>(mine.begin) + i;
    if (hooks) hooks->before_forward(static_cast<int>(l) + 1);
    decoder_layer_forward(lc, w.layers[l], static_cast<int64_t>(l), b.packed, nullptr, lo, x.view(), ws,
                          grads ? &saved->layers[i] : nullptr, diag ? &stats[i] : nullptr);
    if (hooks) hooks->after_forward(static_cast<int>(l) + 1);
  }
  for (size_t i = 0; diag && i < stats.size(); ++i) {
    const size_t l = static_cast<size_t>(mine.begin) + i;
    diag->attention_norm_sum[l] += stats[i].attention_norm_sum;
    diag->mlp_norm_sum[l] += stats[i].mlp_norm_sum;
    diag->output_norm_sum[l] += stats[i].output_norm_sum;
    diag->attention_logit_max[l] = std::max(diag->attention_logit_max[l], stats[i].attention_logit_max);
  }
  StageForward out;
  if (!(sh.final_norm && last_chunk)) {
    out.output = std::move(x);
    if (grads) out.saved = std::move(saved);
    return out;
  }

  // ---- last stage: final norm, lm_head + loss (+ their backward) in row chunks ----
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (hooks) hooks->before_forward(tail);
  if (hooks && grads) hooks->before_backward(tail);
  Tensor xn = Tensor::zeros({n, h}, DType::F32, dev);
  ops::rmsnorm(x.view(), w.norm.view(), eps, xn.view());
  if (act != DType::F32) ops::round_to(xn.view(), act);  // the final norm's output, as the reference stores it
  const bool tied = c.tie_word_embeddings;
  const TensorView head = tied ? w.embed_tokens.view() : w.lm_head.view();
  const TensorView dhead = !grads ? TensorView{} : tied ? grads->embed_tokens.view() : grads->lm_head.view();
  Tensor dxn = grads ? Tensor::zeros({n, h}, DType::F32, dev) : Tensor();
  Tensor logits = Tensor::zeros({std::min(chunk, n), sh.vocab_rows.size()}, DType::F32, dev);
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk);
    const TensorView lg = logits.view().rows(0, r1 - r0);
    const TensorView targets = b.targets.view().rows(r0, r1);
    ops::linear(xn.view().rows(r0, r1), head, lg);
    if (act != DType::F32) ops::round_to(lg, act);  // bf16 logits, read in f32 by the loss
    const ops::CrossEntropySums cs =
        tp ? parallel::vocab_parallel_cross_entropy(lg, sh.vocab_rows.begin, sh.vocab_real.size(), c.vocab_size,
                                                    targets, z_coef, scale, grads ? lg : TensorView{}, *tp)
           : ops::cross_entropy_zloss(lg, targets, z_coef, scale, grads ? lg : TensorView{});
    out.sums.ce_sum += cs.ce_sum, out.sums.z_sq_sum += cs.z_sq_sum, out.sums.count += cs.count;
    if (grads) ops::linear_backward(xn.view().rows(r0, r1), head, lg, dxn.view().rows(r0, r1), dhead);
  }
  // The loss's transients end here, before the tail's gradient is reduce-scattered
  // (docs/architecture.md §7 "Memory plan").
  logits = Tensor(), xn = Tensor();
  if (grads) {
    if (tp) parallel::all_reduce_sum(*tp, dxn.view());  // vocab-parallel lm_head: each rank's share
    saved->dx_top = Tensor::zeros({n, h}, DType::F32, dev);
    ops::rmsnorm_backward(x.view(), w.norm.view(), eps, dxn.view(), saved->dx_top.view(), grads->norm.view());
    dxn = Tensor();
    out.saved = std::move(saved);
  }
  if (hooks && grads) hooks->after_backward(tail);
  if (hooks) hooks->after_forward(tail);
  return out;
}

Tensor stage_backward(const Olmo2Model& model, ModelWeights& g, StageActivations& saved, const Tensor& grad_output,
                      const ParallelContext& ctx, UnitHooks* hooks) {
  const ModelWeights& w = model.weights();
  const ShardSpec& sh = model.shard();
  const Batch& b = saved.b;
  const int64_t n = b.packed.rows(), h = model.config().hidden_size;
  const parallel::Range mine = sh.chunk_locals(saved.model_chunk);
  const bool first_chunk = saved.model_chunk == 0,
             last_chunk = static_cast<size_t>(saved.model_chunk) + 1 == sh.chunks.size();
  Tensor dx;  // gradient of the residual stream (replicated over TP)
  if (sh.final_norm && last_chunk) {
    dx = std::move(saved.dx_top);
  } else {
    if (grad_output.shape() != std::vector<int64_t>{n, h}) {
      OLMO2_THROW(ShapeError, "stage output gradient has shape ", shape_to_string(grad_output.shape()),
                  ", expected [", n, ", ", h, "]");
    }
    dx = Tensor::zeros({n, h}, DType::F32, hooks ? hooks->device() : weights_device(model));
    ops::copy(grad_output.view(), dx.view());
  }
  const LayerContext lc = model.layer_context(ctx);
  LayerBackwardWorkspace ws;
  for (size_t i = static_cast<size_t>(mine.size()); i-- > 0;) {
    const size_t l = static_cast<size_t>(mine.begin) + i;
    if (hooks) hooks->before_backward(static_cast<int>(l) + 1);
    decoder_layer_backward(lc, w.layers[l], g.layers[l], b.packed, saved.layers[i], dx.view(), ws);
    if (hooks) hooks->after_backward(static_cast<int>(l) + 1);
  }
  if (!(sh.embedding && first_chunk)) return dx;  // d(stage input), for the previous stage
  if (hooks) hooks->before_backward(0);
  parallel::vocab_parallel_embedding_backward(b.packed.ids.view(), dx.view(), sh.vocab_rows.begin,
                                              g.embed_tokens.view(), ctx.tensor_parallel());
  if (hooks) hooks->after_backward(0);
  return Tensor();
}

Device weights_device(const Olmo2Model& model) {
  const ModelWeights& w = model.weights();
  for (const Tensor* t : {&w.embed_tokens, &w.norm, &w.lm_head}) {
    if (!t->empty()) return t->device();
  }
  return w.layers.empty() ? Device::CPU : w.layers.front().q_proj.device();
}

int64_t count_targets(const std::vector<Sample>& samples) {
  int64_t count = 0;
  for (const Sample& s : samples) {
    for (const int32_t label : s.labels) count += label != kIgnoreIndex;
  }
  return count;
}

void StageActivationsDeleter::operator()(StageActivations* p) const { delete p; }

LossSums forward_backward(const Olmo2Model& model, ModelWeights& grads, const std::vector<Sample>& samples,
                          float z_coef, float scale, int64_t loss_chunk_tokens, const ParallelContext& ctx,
                          Recompute recompute) {
  const ModelWeights& w = model.weights();
  OLMO2_CHECK(grads.layers.size() == w.layers.size() && grads.embed_tokens.shape() == w.embed_tokens.shape() &&
                  grads.lm_head.shape() == w.lm_head.shape() && grads.norm.shape() == w.norm.shape(),
              "gradients do not match the model (use zeros_like_weights)");
  OLMO2_CHECK(model.shard().embedding && model.shard().final_norm,
              "forward_backward needs every layer on this rank (pipeline stages: pipeline_forward_backward)");
  StageForward f =
      stage_forward(model, &grads, samples, Tensor(), z_coef, scale, loss_chunk_tokens, ctx, nullptr, recompute);
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
