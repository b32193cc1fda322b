// The memory plan (runtime/train/memory_plan.h; docs/architecture.md §7 "Memory plan").
// Every count below is an allocation of the training code, named where it is made.
#include "runtime/train/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/error.h"
#include "runtime/model/decoder_layer.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/precision.h"

#include "runtime/train/zero_units.h"

namespace olmo2 {
namespace {

constexpr int64_t kF32 = 4;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Bytes a ring all-reduce of `bytes` sends from each of `n` ranks: 2(n−1)/n · B.
int64_t ring_all_reduce(int n, int64_t bytes) { return n > 1 ? 2 * (n - 1) * bytes / n : 0; }

/// This rank's shard widths (elements), from its partition (docs/architecture.md §5).
struct Widths {
  int64_t h = 0, qw = 0, kvw = 0, inter = 0, vocab = 0;
};

/// f32 values per token one layer keeps for its backward (docs/architecture.md §7
/// "Activation recomputation"): none keeps x q0 k0 qr kr v attn p x1 gate up m;
/// selective x q0 k0 v p gate up m; full x only.
int64_t kept_per_token(const Widths& w, const std::string& recompute) {
  if (recompute == "full") return w.h;
  if (recompute == "selective") return 3 * w.h + w.qw + 2 * w.kvw + 2 * w.inter;
  return 4 * w.h + 3 * w.qw + 3 * w.kvw + 2 * w.inter;
}

/// Elements of one decoder layer's parameters on this rank: q, o [qw, h]; k, v [kvw, h];
/// q_norm [qw]; k_norm [kvw]; gate, up, down [inter, h]; two post-norms [h].
int64_t layer_elements(const Widths& w) {
  return 2 * w.qw * w.h + 2 * w.kvw * w.h + w.qw + w.kvw + 3 * w.inter * w.h + 2 * w.h;
}

}  // namespace

void check_plan_options(const MemoryPlanOptions& o) {
  parse_recompute(o.recompute, "--recompute");  // the trainer's own parser and message
  parse_precision(o.precision, "--precision");
  if (o.zero_stage < 0 || o.zero_stage > 3) {
    OLMO2_THROW(InputError, "--zero-stage must be 0, 1, 2 or 3, got ", o.zero_stage);
  }
  if (o.seq_len < 1) OLMO2_THROW(InputError, "--seq-len must be at least 1, got ", o.seq_len);
  if (o.micro_batch < 1) OLMO2_THROW(InputError, "--micro-batch must be at least 1, got ", o.micro_batch);
  if (o.layout.cp > 1 && o.seq_len % (2 * o.layout.cp) != 0) {
    OLMO2_THROW(InputError, "--seq-len ", o.seq_len, " is not divisible by 2 × --cp ", o.layout.cp, " = ",
                2 * o.layout.cp, " (each sequence is cut into 2·cp equal chunks, the zigzag split)");
  }
  const int64_t per_step = o.micro_batch * o.layout.dp;
  if (o.global_batch < 0 || (o.global_batch > 0 && o.global_batch % per_step != 0)) {
    OLMO2_THROW(InputError, "--global-batch ", o.global_batch, " is not a positive multiple of --micro-batch ",
                o.micro_batch, " × dp ", o.layout.dp, " = ", per_step);
  }
  if (o.grad_bucket_mb < 1) OLMO2_THROW(InputError, "--grad-bucket-mb must be at least 1, got ", o.grad_bucket_mb);
  if (o.serve && (o.zero_stage != 0 || o.recompute != "none")) {
    OLMO2_THROW(InputError, "--zero-stage and --recompute plan training; --serve plans serving (no gradients or "
                            "optimizer state): give one or the other");
  }
  if (o.serve && (o.layout.cp > 1 || o.pp_virtual > 1)) {
    OLMO2_THROW(InputError, "--cp and --pp-virtual plan training; serve takes neither");
  }
  if (o.kv_cache_bytes < 0) OLMO2_THROW(InputError, "--kv-cache-memory must not be negative, got ", o.kv_cache_bytes);
}

namespace {

void check_options(const MemoryPlanOptions& o, const ModelConfig& c) {
  check_plan_options(o);
  if (o.zero_stage >= 1 && o.layout.dp == 1 && !o.serve) {
    OLMO2_THROW(InputError, "--zero-stage ", o.zero_stage, " shards over data-parallel ranks; this layout has dp 1");
  }
  if (!o.serve) check_zero_stage_model(o.zero_stage, c, o.layout.tp);
  if (!o.serve && o.zero_stage >= 2 && o.layout.cp > 1) {  // as the trainer refuses it
    OLMO2_THROW(InputError, "--zero-stage ", o.zero_stage, " with --cp ", o.layout.cp,
                ": ZeRO-2/3 reduce-scatter gradients over dp inside the backward, before the sum over cp; use "
                "--zero-stage 0 or 1");
  }
  if (!o.serve && c.tie_word_embeddings && o.layout.pp > 1) {
    OLMO2_THROW(InputError, "the model ties lm_head to the embedding (tie_word_embeddings), which pipeline "
                            "parallelism cannot split over stages: use --pp 1");
  }
}

/// Training: fills every component of `m` for partition `rp` (docs/architecture.md §7).
void plan_training_rank(const ModelConfig& c, const MemoryPlanOptions& o, const parallel::PartitionPlan& plan,
                        const parallel::RankPartition& rp, int64_t M, RankMemory& m) {
  const parallel::Layout l = plan.topology.layout();
  const Widths w{c.hidden_size, rp.q_rows.size(), rp.kv_rows.size(), rp.mlp_rows.size(), rp.vocab_rows.size()};
  const bool first = rp.coords.pp == 0, last = rp.final_norm;
  const int dp = l.dp, zero = o.zero_stage;
  const int64_t cb = parse_precision(o.precision, "--precision") == Precision::BF16 ? 2 : 4;
  // Context parallelism: a rank holds 1/cp of every sequence's rows (docs/architecture.md §7).
  const int cp = l.cp;
  const int64_t T = o.seq_len * o.micro_batch / cp, s = o.seq_len / cp;
  // ZeRO units (docs/architecture.md §7): the embedding, each layer, the tail.
  std::vector<int64_t> units;
  if (rp.embedding || (last && c.tie_word_embeddings)) units.push_back(w.vocab * w.h);
  for (int64_t i = 0; i < m.layers; ++i) units.push_back(layer_elements(w));
  if (last) units.push_back(w.h + (c.tie_word_embeddings ? 0 : w.vocab * w.h));
  int64_t N = 0, C = 0;
  for (const int64_t u : units) N += u, C += ceil_div(u, dp);
  OLMO2_CHECK(N == rp.parameters + rp.padding_elements, "memory plan: rank ", rp.rank, " holds ", N,
              " elements by its units, the partition says ", rp.parameters + rp.padding_elements);
  const int64_t c1 = ceil_div(N, dp);  // ZeRO-1's chunk of the flat parameter list

  // The state: trainer.cpp's build_model_and_optimizer, data_parallel_adamw.cpp. ZeRO-3
  // holds only the f32 master chunks (the parameters themselves in fp32); its gathers
  // round them to the compute dtype, so no bf16 chunk is kept.
  m.weights = zero == 3 ? (cb == kF32 ? C * kF32 : 0) : N * cb;
  m.master_weights = cb == 2 ? (zero == 3 ? C : N) * kF32 : 0;
  m.gradients = (zero >= 2 ? C : N) * kF32;
  m.optimizer = zero == 0 ? 2 * N * kF32 : zero == 1 ? 4 * c1 * kF32 : 2 * C * kF32;  // ZeRO-1: + staged values, grads

  // Activations: StageActivations per micro-batch (train_step.cpp) — every layer's kept
  // set, the ids, positions and targets (i32), and on the last stage d(output).
  // Under CP a layer that keeps its attention output keeps ring attention's
  // log-sum-exp [T, local heads] beside it.
  const int64_t lse = cp > 1 && o.recompute == "none" ? w.qw / c.head_dim : 0;
  m.activations_per_micro_batch =
      T * (m.layers * (kept_per_token(w, o.recompute) + lse) + (last ? w.h : 0)) * kF32 + T * 12;
  const int V = o.pp_virtual;
  if (l.pp > 1 && V > 1) {  // (micro-batch, chunk) pairs in flight, each 1/V of the stage's layers
    const int64_t warmup = std::min<int64_t>(2 * (l.pp - rp.coords.pp - 1) + int64_t{V - 1} * l.pp, M * V);
    const int64_t pairs = std::min<int64_t>(warmup + 1, M * V);
    m.micro_batches_held = ceil_div(pairs, V);
    m.activations = m.activations_per_micro_batch * pairs / V;
  } else {
    m.micro_batches_held = l.pp > 1 ? std::min<int64_t>(l.pp - rp.coords.pp, M) : 1;
    m.activations = m.activations_per_micro_batch * m.micro_batches_held;
  }
  // Pipeline buffers alive beside them (pipeline_schedule.cpp): the received input
  // (not stage 0), the sent output and the received output gradient (not the last).
  m.comm_buffers = l.pp > 1 ? T * w.h * kF32 * ((first ? 0 : 1) + (last ? 0 : 2)) : 0;

  // Working memory while a micro-batch computes (the largest phase).
  // Attention's own memory: one process holds a sequence's [s, s] scores (a sliding layer
  // sees fewer keys); ring attention (cp > 1) a K/V block in flight (the backward also its
  // dK/dV), a 4 MiB piece of it twice and a 128-row score tile, never [s, s].
  const int64_t tile = 128 * (o.seq_len / (2 * cp)) + (int64_t{1} << 20);
  const int64_t scores = cp > 1 ? 2 * T * w.kvw + tile : s * s;
  const int64_t scores_bwd = cp > 1 ? 4 * T * w.kvw + 2 * tile : 2 * s * s;
  const int64_t fwd = (2 * T * w.h + T * w.inter + scores) * kF32;  // x, ws.proj, ws.act, scores
  const int64_t bwd = (T * (2 * w.h + 4 * w.inter + 2 * w.qw + 2 * w.kvw + (l.tp > 1 ? w.h : 0)) + scores_bwd) * kF32;
  const int64_t loss = last ? (3 * T * w.h + std::min(o.loss_chunk_tokens, T) * w.vocab) * kF32 : 0;
  int64_t recompute = 0;
  if (o.recompute == "full") {  // one layer's `none` set but x, a copy of x, the forward's scratch
    recompute = T * (kept_per_token(w, "none") - w.h + 2 * w.h + w.inter) * kF32 + scores * kF32;
  } else if (o.recompute == "selective") {  // qr, kr, attn, x1 and the attention scores
    recompute = (T * (2 * w.qw + w.kvw + w.h) + scores) * kF32;
  }
  // ZeRO-2/3 units in use (zero_shards.cpp): a unit's flat f32 gradient [d·⌈N_u/d⌉] from
  // before its backward to its reduce-scatter, which sends it in pieces of at most the
  // bucket (a [d, piece] send buffer unless the unit fits, the received piece, and the
  // transport's copy of the whole message on a rank that reduces); at stage 3 also the
  // unit's gathered weights in cb and the next unit's gather in flight (chunk and whole).
  const int64_t layer_n = layer_elements(w), tail_n = w.h + w.vocab * w.h, emb_n = w.vocab * w.h;
  const int64_t bucket_bytes = o.grad_bucket_mb << 20;
  auto flat = [&](int64_t n) { return dp * ceil_div(n, dp); };
  auto grad_of = [&](int64_t n) { return zero >= 2 ? kF32 * flat(n) : 0; };
  auto gathered = [&](int64_t n) { return zero == 3 ? cb * flat(n) : 0; };
  auto in_flight = [&](int64_t n) { return zero == 3 && n > 0 ? cb * (flat(n) + ceil_div(n, dp)) : 0; };
  auto scatter = [&](int64_t n) -> int64_t {
    if (zero < 2) return 0;
    const int64_t chunk = ceil_div(n, dp), piece = std::clamp<int64_t>(bucket_bytes / (kF32 * dp), 1, chunk);
    return kF32 * piece * ((piece < chunk ? dp : 0) + 1 + dp);
  };
  const int64_t next_layer = m.layers > 0 ? layer_n : 0;
  // --overlap at ZeRO-2/3: the unit before (the layer above, or the tail) keeps its flat
  // gradient and its last piece in flight through this unit's backward (zero_shards.cpp).
  const int64_t above = last ? std::max(layer_n, tail_n) : layer_n;
  const int64_t in_reduction = o.overlap && zero >= 2 ? grad_of(above) + scatter(above) : 0;
  const std::string unit_note = zero >= 2 ? " + ZeRO-" + std::to_string(zero) + " unit" : "";
  // Phases while a micro-batch's activations are held: bytes beyond them.
  std::vector<std::pair<int64_t, std::string>> held;
  if (m.layers > 0) {
    held.emplace_back(fwd + gathered(layer_n) + in_flight(last ? std::max(layer_n, tail_n) : layer_n),
                      "a layer's forward" + std::string(zero == 3 ? " + the gathered layer and the next" : ""));
    held.emplace_back(bwd + recompute + grad_of(layer_n) + gathered(layer_n) + in_flight(layer_n) + in_reduction,
                      (o.recompute == "none" ? "a layer's backward" : "a layer's backward and its recompute") +
                          unit_note);
    if (zero >= 2) held.emplace_back(grad_of(layer_n) + scatter(layer_n) + gathered(layer_n) + in_flight(layer_n) +
                                         in_reduction,
                                     "a layer's gradient reduce-scatter");
  }
  if (last) {
    held.emplace_back(loss + grad_of(tail_n) + gathered(tail_n) + in_flight(next_layer),
                      "the loss chunk's logits [" + std::to_string(std::min(o.loss_chunk_tokens, T)) + ", " +
                          std::to_string(w.vocab) + "]" + unit_note);
    if (zero >= 2) held.emplace_back(T * w.h * kF32 + grad_of(tail_n) + scatter(tail_n) + gathered(tail_n) +
                                         in_flight(next_layer),
                                     "the tail's gradient reduce-scatter");
  }
  // Phases without this micro-batch's activations (its layers free theirs in the
  // backward; other micro-batches in flight keep theirs): beyond the state.
  std::vector<std::pair<int64_t, std::string>> free;
  // After the backward (grad_sync.cpp, data_parallel_adamw.cpp): the DP bucket (ZeRO
  // 0/1); ZeRO-1's all-gather of its updated chunk ([c] and [c·d]); ZeRO-2's staged chunk
  // values and one unit's all-gather at a time.
  // With --overlap the buckets' buffers are a copy of the gradients that the trainer keeps
  // from step to step (a communication buffer); without, one bucket after the backward.
  if (dp > 1 && zero <= 1 && o.overlap) m.comm_buffers += N * kF32;
  if (dp > 1 && zero <= 1 && !o.overlap) {
    free.emplace_back(std::min<int64_t>(bucket_bytes, N * kF32), "the DP gradient bucket");
  }
  if (zero == 1) free.emplace_back(c1 * (dp + 1) * kF32, "the optimizer step's all-gather");
  if (zero == 2) free.emplace_back(C * kF32 + ceil_div(std::max({emb_n * rp.embedding, layer_n, tail_n * last}), dp) *
                                                  (dp + 1) * kF32,
                                   "the optimizer step's staged values and a unit's all-gather");
  if (zero >= 2 && rp.embedding) {
    free.emplace_back(m.activations - m.activations_per_micro_batch + m.comm_buffers + T * w.h * kF32 +
                          grad_of(emb_n) + scatter(emb_n) + (o.overlap ? grad_of(next_layer) + scatter(next_layer) : 0),
                      "the embedding's gradient reduce-scatter");
  }
  if (held.empty()) held.emplace_back(0, "nothing (no layers)");
  const auto top = *std::max_element(held.begin(), held.end());
  const int64_t during_compute = m.activations + m.comm_buffers + top.first;
  m.working = top.first, m.working_phase = top.second;
  for (const auto& [bytes, phase] : free) {
    if (bytes > during_compute && bytes - m.activations - m.comm_buffers > m.working) {
      m.working = bytes - m.activations - m.comm_buffers;
      m.working_phase = phase + " (no activations of its micro-batch held then)";
    }
  }

  // Bytes sent per step (ring collectives: all-reduce 2(n−1)/n·B, all-gather and
  // reduce-scatter (n−1)/n·B; docs/architecture.md §6).
  const int tp = l.tp;
  const int64_t hid = T * w.h * kF32;
  int64_t per_layer = 2 * ring_all_reduce(tp, hid) + ring_all_reduce(tp, 8 * T)  // o, down; QK-norm [T, 2]
                      + 2 * ring_all_reduce(tp, hid) + ring_all_reduce(tp, 16 * T);  // backward; QK-norm [T, 4]
  if (o.recompute == "full") per_layer += 2 * ring_all_reduce(tp, hid) + ring_all_reduce(tp, 8 * T);
  if (o.recompute == "selective") per_layer += ring_all_reduce(tp, 8 * T);
  int64_t tp_bytes = m.layers * per_layer + (rp.embedding ? ring_all_reduce(tp, hid) : 0) +
                     (last ? ring_all_reduce(tp, hid) + 3 * ring_all_reduce(tp, 4 * T) : 0);
  tp_bytes *= M;
  if (rp.kv_replicas > 1) {  // sum_kv_replica_gradients: the replicated k, v, k_norm at full size
    const int64_t kv_full = c.num_key_value_heads * c.head_dim;
    tp_bytes += ring_all_reduce(tp, m.layers * (2 * kv_full * w.h + kv_full) * kF32);
  }
  m.sent_tp = tp_bytes;
  // Every chunk boundary crosses ranks: 2V − 1 sends of each micro-batch's rows on the
  // first and last stage, 2V on the others (V = 1: plain 1F1B's one or two).
  m.sent_pp = l.pp > 1 ? M * hid * (2 * V - (first ? 1 : 0) - (last ? 1 : 0)) : 0;
  if (cp > 1) {  // ring attention (runtime/model/ring_attention.h) per layer and micro-batch
    const int64_t block = 2 * T * w.kvw * kF32;  // this rank's K and V
    const int64_t passes = cb == 2 ? 2 : 1;       // bf16: the forward goes over the ring twice
    int64_t ring = (cp - 1) * block * passes                               // forward
                   + (cp - 1) * 2 * block + block                          // backward: k, v, dk, dv; dk, dv home
                   + (cb == 2 ? (cp - 1) * block : 0);                     // bf16: the f32 output's pass
    if (o.recompute != "none") ring += (cp - 1) * block * passes;          // the attention recomputed
    m.sent_cp = M * m.layers * ring + (zero <= 1 ? ring_all_reduce(cp, N * kF32) : 0);
  }
  if (dp > 1) {
    if (zero <= 1) m.sent_dp = ring_all_reduce(dp, N * kF32) + (zero == 1 ? (dp - 1) * c1 * kF32 : 0);
    if (zero == 2) m.sent_dp = M * (dp - 1) * C * kF32 + (dp - 1) * C * kF32;  // the step gathers per unit
    if (zero == 3) m.sent_dp = M * (dp - 1) * C * kF32 + 2 * M * (dp - 1) * C * cb;
  }
}

}  // namespace

const RankMemory& MemoryPlan::largest() const {
  OLMO2_CHECK(!ranks.empty(), "a memory plan without ranks");
  return *std::max_element(ranks.begin(), ranks.end(),
                           [](const RankMemory& a, const RankMemory& b) { return a.total < b.total; });
}

int64_t runtime_baseline_bytes(Device device) {
  // CPU: peak RSS of `olmo2 train` on a model of a few MB (docs/architecture.md §7 "Memory plan").
  return device == Device::CPU ? int64_t{220} << 20 : int64_t{1} << 30;
}

MemoryPlan plan_memory(const ModelConfig& c, const MemoryPlanOptions& o) {
  check_options(o, c);
  const parallel::PartitionPlan plan = parallel::make_partition_plan(
      model_shape(c), parallel::Topology::make(o.layout), o.pp_layers, o.serve ? 1 : o.pp_virtual);
  MemoryPlan out;
  out.options = o;
  const int64_t per_step = o.micro_batch * o.layout.dp;
  out.micro_batches = o.global_batch > 0 ? o.global_batch / per_step : 1;
  if (!o.serve && o.pp_virtual > 1 && out.micro_batches % o.layout.pp != 0) {  // as the trainer refuses it
    OLMO2_THROW(InputError, "--pp-virtual ", o.pp_virtual, ": the interleaved schedule needs the micro-batches per "
                "step (", out.micro_batches, ") to be a multiple of --pp ", o.layout.pp);
  }
  const int64_t runtime = o.runtime_bytes >= 0 ? o.runtime_bytes : runtime_baseline_bytes(o.device);
  for (const parallel::RankPartition& rp : plan.ranks) {
    RankMemory m;
    m.rank = rp.rank, m.coords = rp.coords, m.layers = rp.layer_count(), m.runtime = runtime;
    if (o.serve) {
      m.weights = (rp.parameters + rp.padding_elements) * static_cast<int64_t>(dtype_size(o.serve_dtype));
      m.kv_cache = o.kv_cache_bytes;
      m.kv_block_bytes = KVCache::bytes_per_block(c, ShardSpec::from_plan(plan, rp.rank), o.kv_block_size,
                                                  o.kv_cache_dtype);
      m.working_phase = "not modelled for serving";
    } else {
      plan_training_rank(c, o, plan, rp, out.micro_batches, m);
    }
    m.total = m.runtime + m.weights + m.master_weights + m.gradients + m.optimizer + m.comm_buffers + m.kv_cache +
              m.activations + m.working;
    out.ranks.push_back(std::move(m));
  }
  if (o.serve) {  // every rank's pool has the fullest rank's block count (as serve)
    int64_t per_block = 1;
    for (const RankMemory& m : out.ranks) per_block = std::max(per_block, m.kv_block_bytes);
    out.kv_blocks = o.kv_cache_bytes / per_block;
  }
  return out;
}

std::string format_gb(int64_t bytes, int decimals) {
  char s[48];
  std::snprintf(s, sizeof s, "%.*f GB", decimals, static_cast<double>(bytes) / 1e9);
  return s;
}

std::string largest_components(const RankMemory& m, int n) {
  std::vector<std::pair<int64_t, const char*>> parts = {
      {m.weights, "weights"},         {m.master_weights, "master weights"}, {m.gradients, "gradients"},
      {m.optimizer, "optimizer moments"}, {m.activations, "activations"},   {m.working, "working memory"},
      {m.comm_buffers, "communication buffers"}, {m.kv_cache, "KV cache"}, {m.runtime, "runtime"}};
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (int i = 0; i < n && i < static_cast<int>(parts.size()) && parts[static_cast<size_t>(i)].first > 0; ++i) {
    out += (i ? ", " : "") + std::string(parts[static_cast<size_t>(i)].second) + " " +
           format_gb(parts[static_cast<size_t>(i)].first);
  }
  return out;
}

}  // namespace olmo2
