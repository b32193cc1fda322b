// The memory plan (runtime/train/memory_plan.h) against byte counts computed here from a
// tiny config's dimensions, independently of the library: the state per ZeRO stage, the
// activations per recompute mode and 1F1B's micro-batches held, the shards under TP and
// PP, the bytes sent per group, and the refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "monitoring/peak_memory.h"
#include "runtime/train/memory_plan.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;

// vocab 128, hidden 64, intermediate 128, 2 layers, 4 heads of 16, 2 kv heads.
constexpr int64_t V = 128, H = 64, I = 128, L = 2, QW = 64, KVW = 32;

ModelConfig tiny() {
  return ModelConfig::from_json(nlohmann::json{{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"},
                                 {"vocab_size", V}, {"hidden_size", H}, {"intermediate_size", I},
                                 {"num_hidden_layers", L}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                                 {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                                 {"tie_word_embeddings", false}, {"eos_token_id", 1}},
                                "tiny");
}

/// One layer's parameters at q/o width qw, k/v width kvw, MLP rows inter.
int64_t layer(int64_t qw, int64_t kvw, int64_t inter) {
  return qw * H + kvw * H + kvw * H + H * qw + qw + kvw + inter * H + inter * H + H * inter + H + H;
}
const int64_t P = V * H + L * layer(QW, KVW, I) + H + V * H;  // embedding, layers, norm, lm_head

MemoryPlanOptions options(int tp = 1, int pp = 1, int dp = 1) {
  MemoryPlanOptions o;
  o.layout = {tp, pp, dp};
  o.seq_len = 16, o.micro_batch = 2, o.runtime_bytes = 0;
  return o;
}

TEST(MemoryPlan, OneProcessFp32CountsEveryTensor) {
  const MemoryPlan plan = plan_memory(tiny(), options());
  ASSERT_EQ(plan.ranks.size(), 1u);
  const RankMemory& m = plan.ranks[0];
  EXPECT_EQ(m.weights, 4 * P);
  EXPECT_EQ(m.master_weights, 0);
  EXPECT_EQ(m.gradients, 4 * P);
  EXPECT_EQ(m.optimizer, 8 * P);
  const int64_t T = 32;  // tokens of a micro-batch
  // x q0 k0 qr kr v attn p x1 gate up m per layer, d(output) on the last stage, ids/positions/targets.
  const int64_t kept = 4 * H + 3 * QW + 3 * KVW + 2 * I;
  EXPECT_EQ(m.activations_per_micro_batch, 4 * T * (L * kept + H) + 12 * T);
  EXPECT_EQ(m.micro_batches_held, 1);
  EXPECT_EQ(m.activations, m.activations_per_micro_batch);
  EXPECT_EQ(m.comm_buffers, 0);
  EXPECT_GT(m.working, 0);
  EXPECT_EQ(m.total, m.weights + m.gradients + m.optimizer + m.activations + m.working);
  EXPECT_EQ(m.sent_tp + m.sent_pp + m.sent_dp, 0);
}

TEST(MemoryPlan, Bf16KeepsABf16CopyBesideF32Masters) {
  MemoryPlanOptions o = options();
  o.precision = "bf16";
  const RankMemory m = plan_memory(tiny(), o).ranks[0];
  EXPECT_EQ(m.weights, 2 * P);
  EXPECT_EQ(m.master_weights, 4 * P);
  EXPECT_EQ(m.gradients, 4 * P);
}

TEST(MemoryPlan, RecomputeKeepsLess) {
  const int64_t T = 32;
  const std::pair<const char*, int64_t> modes[] = {{"none", 4 * H + 3 * QW + 3 * KVW + 2 * I},
                                                   {"selective", 3 * H + QW + 2 * KVW + 2 * I},
                                                   {"full", H}};
  for (const auto& [mode, kept] : modes) {
    MemoryPlanOptions o = options();
    o.recompute = mode;
    EXPECT_EQ(plan_memory(tiny(), o).ranks[0].activations_per_micro_batch, 4 * T * (L * kept + H) + 12 * T) << mode;
  }
}

TEST(MemoryPlan, TensorParallelShardsEveryRank) {
  const MemoryPlan plan = plan_memory(tiny(), options(2));
  ASSERT_EQ(plan.ranks.size(), 2u);
  // Half the heads (kv 2 over tp 2: one each), half the MLP rows and vocab rows; norms whole.
  const int64_t p = V / 2 * H + L * layer(QW / 2, KVW / 2, I / 2) + H + V / 2 * H;
  for (const RankMemory& m : plan.ranks) {
    EXPECT_EQ(m.weights, 4 * p);
    const int64_t T = 32;
    const int64_t kept = 4 * H + 3 * (QW / 2) + 3 * (KVW / 2) + 2 * (I / 2);
    EXPECT_EQ(m.activations_per_micro_batch, 4 * T * (L * kept + H) + 12 * T);
    // Per micro-batch: per layer two [T, h] all-reduces each way, QK-norm [T, 2] and [T, 4];
    // the embedding's and d(normed hidden)'s [T, h]; the loss's three [T] (ring: 2(n-1)/n = 1).
    const int64_t hid = 4 * T * H;
    EXPECT_EQ(m.sent_tp, L * (4 * hid + 8 * T + 16 * T) + hid + hid + 3 * 4 * T);
  }
}

TEST(MemoryPlan, PipelineStagesHoldTheirMicroBatches) {
  MemoryPlanOptions o = options(1, 2);
  o.global_batch = 8;  // 4 micro-batches of 2
  const MemoryPlan plan = plan_memory(tiny(), o);
  ASSERT_EQ(plan.micro_batches, 4);
  const RankMemory &s0 = plan.ranks[0], &s1 = plan.ranks[1];
  EXPECT_EQ(s0.weights, 4 * (V * H + layer(QW, KVW, I)));
  EXPECT_EQ(s1.weights, 4 * (layer(QW, KVW, I) + H + V * H));
  EXPECT_EQ(s0.micro_batches_held, 2);  // min(pp - stage, micro-batches)
  EXPECT_EQ(s1.micro_batches_held, 1);
  const int64_t T = 32, kept = 4 * H + 3 * QW + 3 * KVW + 2 * I;
  EXPECT_EQ(s0.activations, 2 * (4 * T * kept + 12 * T));
  EXPECT_EQ(s1.activations, 4 * T * (kept + H) + 12 * T);
  EXPECT_EQ(s0.sent_pp, 4 * 4 * T * H);  // each micro-batch's output forward
  EXPECT_EQ(s1.sent_pp, 4 * 4 * T * H);  // and its input gradient backward
  EXPECT_EQ(s0.comm_buffers, 2 * 4 * T * H);  // sent output, received gradient
  EXPECT_EQ(s1.comm_buffers, 4 * T * H);      // received input
}

TEST(MemoryPlan, ZeroStagesShardWhatTheySay) {
  const int64_t units[] = {V * H, layer(QW, KVW, I), layer(QW, KVW, I), H + V * H};
  int64_t C = 0;
  for (int64_t u : units) C += (u + 1) / 2;
  const int64_t c1 = (P + 1) / 2;
  std::vector<RankMemory> by_stage;
  for (int zero = 0; zero <= 3; ++zero) {
    MemoryPlanOptions o = options(1, 1, 2);
    // Without --overlap: in a model this tiny the tail's whole gradient, still being
    // reduce-scattered beside a layer's backward, outweighs what the sharding saves.
    o.zero_stage = zero, o.overlap = false;
    const MemoryPlan plan = plan_memory(tiny(), o);
    ASSERT_EQ(plan.ranks.size(), 2u);
    by_stage.push_back(plan.ranks[1]);
  }
  EXPECT_EQ(by_stage[0].optimizer, 8 * P);
  EXPECT_EQ(by_stage[1].optimizer, 16 * c1);  // moments and the staged values and gradients of the chunk
  EXPECT_EQ(by_stage[1].gradients, 4 * P);
  EXPECT_EQ(by_stage[2].gradients, 4 * C);
  EXPECT_EQ(by_stage[2].optimizer, 8 * C);
  EXPECT_EQ(by_stage[2].weights, 4 * P);
  EXPECT_EQ(by_stage[3].weights, 4 * C);  // fp32: the master chunks are the parameters
  EXPECT_EQ(by_stage[3].gradients, 4 * C);
  // Sent per step at dp 2 (one micro-batch): all-reduce 2(n-1)/n·4P; ZeRO-1 adds the
  // all-gather of its chunk; ZeRO-2 reduce-scatters the units and all-gathers; ZeRO-3
  // reduce-scatters and gathers every unit twice (forward and backward).
  EXPECT_EQ(by_stage[0].sent_dp, 4 * P);
  EXPECT_EQ(by_stage[1].sent_dp, 4 * P + 4 * c1);
  EXPECT_EQ(by_stage[2].sent_dp, 4 * C + 4 * c1);
  EXPECT_EQ(by_stage[3].sent_dp, 4 * C + 2 * 4 * C);
  // ZeRO-1 at dp 2 holds as much as ZeRO-0 (moments of half + the staged half values and
  // gradients) and, at the step, gathers [c] and [c·dp]: more than no sharding here.
  EXPECT_GT(by_stage[1].total, by_stage[0].total);
  for (size_t z = 2; z < 4; ++z) EXPECT_LT(by_stage[z].total, by_stage[0].total) << "ZeRO-" << z;
}

// ZeRO-2/3's transients (docs/architecture.md §7 "Memory plan"), at dp 2 with one
// micro-batch of T = 32 tokens, units within the 25 MiB bucket (each reduce-scattered
// whole: the received chunk and the transport's copy of the [2c] message): the working
// memory is the largest phase, each counted here from the dimensions.
TEST(MemoryPlan, ZeroWorkingMemoryIsTheLargestUnitPhase) {
  const int64_t T = 32, s = 16, d = 2;
  const int64_t lay = layer(QW, KVW, I), tail = H + V * H;
  auto chunk = [&](int64_t n) { return (n + d - 1) / d; };
  const int64_t fwd = 4 * (2 * T * H + T * I + s * s);                         // x, scratch, one head's scores
  const int64_t bwd = 4 * (T * (2 * H + 4 * I + 2 * QW + 2 * KVW) + 2 * s * s);  // the layer backward's workspace
  const int64_t loss = 4 * (3 * T * H + T * V);                                // x, xn, dxn, logits [32, V]
  for (const int stage : {2, 3}) {
    const int64_t cb = stage == 3 ? 4 : 0;  // stage 3 gathers f32 weights (fp32)
    auto grad = [&](int64_t n) { return 4 * d * chunk(n); };
    auto scatter = [&](int64_t n) { return 4 * chunk(n) + 4 * d * chunk(n); };
    auto gathered = [&](int64_t n) { return cb * d * chunk(n); };
    auto in_flight = [&](int64_t n) { return cb * (d + 1) * chunk(n); };
    // --overlap (the default): the unit above (a layer or the tail) still reduce-scattering.
    const int64_t above = grad(std::max(lay, tail)) + scatter(std::max(lay, tail));
    const int64_t phases[] = {
        fwd + gathered(lay) + in_flight(std::max(lay, tail)),
        bwd + grad(lay) + gathered(lay) + in_flight(lay) + above,
        grad(lay) + scatter(lay) + gathered(lay) + in_flight(lay) + above,
        loss + grad(tail) + gathered(tail) + in_flight(lay),
        4 * T * H + grad(tail) + scatter(tail) + gathered(tail) + in_flight(lay),
    };
    MemoryPlanOptions o = options(1, 1, 2);
    o.zero_stage = stage;
    const RankMemory m = plan_memory(tiny(), o).ranks[0];
    EXPECT_EQ(m.working, *std::max_element(std::begin(phases), std::end(phases))) << "ZeRO-" << stage;
    EXPECT_EQ(m.weights, stage == 3 ? 4 * (chunk(V * H) + L * chunk(lay) + chunk(tail)) : 4 * P);
  }
  // bf16 at stage 3 keeps only the f32 master chunks (its gathers round them).
  MemoryPlanOptions o = options(1, 1, 2);
  o.zero_stage = 3, o.precision = "bf16";
  const RankMemory m = plan_memory(tiny(), o).ranks[0];
  EXPECT_EQ(m.weights, 0);
  EXPECT_EQ(m.master_weights, 4 * (chunk(V * H) + L * chunk(lay) + chunk(tail)));
}

TEST(MemoryPlan, ServingHoldsWeightsAndTheCache) {
  MemoryPlanOptions o = options(2);
  o.serve = true, o.kv_cache_bytes = 1 << 20;
  const RankMemory m = plan_memory(tiny(), o).ranks[0];
  EXPECT_EQ(m.weights, 2 * (V / 2 * H + L * layer(QW / 2, KVW / 2, I / 2) + H + V / 2 * H));
  EXPECT_EQ(m.kv_cache, 1 << 20);
  EXPECT_EQ(m.gradients + m.optimizer + m.activations + m.master_weights, 0);
  EXPECT_EQ(m.total, m.weights + m.kv_cache);
}

TEST(MemoryPlan, BadInputNamesTheOption) {
  auto message = [](MemoryPlanOptions o) {
    try {
      plan_memory(tiny(), o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  MemoryPlanOptions o = options();
  o.recompute = "some";
  EXPECT_THAT(message(o), HasSubstr("--recompute must be none, selective or full, got \"some\""));
  o = options(), o.zero_stage = 2;
  EXPECT_THAT(message(o), HasSubstr("--zero-stage 2 shards over data-parallel ranks; this layout has dp 1"));
  o = options(3);
  EXPECT_THAT(message(o), HasSubstr("tp"));
  o = options(1, 1, 2), o.global_batch = 3;
  EXPECT_THAT(message(o), HasSubstr("--global-batch 3"));
}

TEST(MemoryPlan, LargestComponentsAndVmHwm) {
  RankMemory m;
  m.weights = 3'000'000'000, m.gradients = 1'000'000'000, m.activations = 2'500'000'000;
  EXPECT_EQ(largest_components(m, 2), "weights 3.00 GB, activations 2.50 GB");
  EXPECT_EQ(monitoring::parse_vm_hwm("Name:\tx\nVmPeak:\t  10 kB\nVmHWM:\t    1234 kB\nVmRSS: 5 kB\n"), 1234 * 1024);
  EXPECT_EQ(monitoring::parse_vm_hwm("VmRSS: 5 kB\n"), 0);
  EXPECT_GT(monitoring::peak_resident_bytes(), 0);
}

// 4 layers: what the interleaved schedule splits into pp·V = 4 chunks of one layer.
ModelConfig four_layers() {
  nlohmann::json j = {{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", V},
                      {"hidden_size", H}, {"intermediate_size", I}, {"num_hidden_layers", 4},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 64},
                      {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"tie_word_embeddings", false},
                      {"eos_token_id", 1}};
  return ModelConfig::from_json(j, "four layers");
}

TEST(MemoryPlan, InterleavedScheduleHoldsItsChunksInFlight) {
  MemoryPlanOptions o = options(1, 2, 1);
  o.global_batch = 8;  // M = 4 micro-batches of 2
  const MemoryPlan plain = plan_memory(four_layers(), o);
  o.pp_virtual = 2;
  const MemoryPlan inter = plan_memory(four_layers(), o);
  const int64_t T = 32;
  for (size_t s = 0; s < 2; ++s) {  // two layers a stage either way
    EXPECT_EQ(inter.ranks[s].activations_per_micro_batch, plain.ranks[s].activations_per_micro_batch);
  }
  const int64_t a0 = plain.ranks[0].activations_per_micro_batch, a1 = plain.ranks[1].activations_per_micro_batch;
  EXPECT_EQ(plain.ranks[0].activations, 2 * a0);  // 1F1B: min(P − s, M)
  EXPECT_EQ(plain.ranks[1].activations, 1 * a1);
  // Warm-up w = min(2(P − s − 1) + (V − 1)·P, M·V): 4 on stage 0, 2 on stage 1; w + 1
  // (micro-batch, chunk) pairs of half the stage's layers each.
  EXPECT_EQ(inter.ranks[0].activations, 5 * a0 / 2);
  EXPECT_EQ(inter.ranks[1].activations, 3 * a1 / 2);
  // Every chunk boundary crosses ranks: 2V − 1 sends of each micro-batch's rows on both stages.
  EXPECT_EQ(inter.ranks[0].sent_pp, 4 * 3 * 4 * T * H);
  EXPECT_EQ(inter.ranks[1].sent_pp, 4 * 3 * 4 * T * H);
  o.global_batch = 6;  // M = 3: not a multiple of P
  EXPECT_THAT([&] { plan_memory(four_layers(), o); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("multiple of --pp 2")));
}

TEST(MemoryPlan, ContextParallelRanksHoldTheirShareOfEverySequence) {
  MemoryPlanOptions o = options();
  o.recompute = "full";
  o.layout.cp = 2;
  const MemoryPlan plan = plan_memory(tiny(), o);
  ASSERT_EQ(plan.ranks.size(), 2u);
  EXPECT_EQ(plan.ranks[1].coords.cp, 1);
  const int64_t T = 16;  // 2 sequences of 16 over 2 ranks
  const RankMemory& m = plan.ranks[0];
  EXPECT_EQ(m.weights, 4 * P);  // the whole model on every CP rank
  EXPECT_EQ(m.activations_per_micro_batch, 4 * T * (L * H + H) + 12 * T);
  // Per layer: the K/V block around the ring forward, with dK/dV backward and home, and
  // once more in the recomputed forward; then the gradients' all-reduce over cp.
  const int64_t block = 2 * T * KVW * 4;
  EXPECT_EQ(m.sent_cp, L * (block + 2 * block + block + block) + 4 * P);
  EXPECT_EQ(plan_memory(tiny(), options()).ranks[0].sent_cp, 0);
  o.seq_len = 18;  // not a multiple of 2·cp
  EXPECT_THAT([&] { plan_memory(tiny(), o); }, ::testing::ThrowsMessage<InputError>(HasSubstr("2 × --cp 2 = 4")));
  o.seq_len = 16, o.layout.dp = 2, o.zero_stage = 3;
  EXPECT_THAT([&] { plan_memory(tiny(), o); }, ::testing::ThrowsMessage<InputError>(HasSubstr("--cp 2")));
}

}  // namespace
}  // namespace olmo2
