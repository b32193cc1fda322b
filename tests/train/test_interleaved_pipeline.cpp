// The interleaved 1F1B schedule (docs/architecture.md §5 "Interleaved 1F1B"): its order
// (each chunk's micro-batches in order, every backward after its forward, Megatron-LM's
// warm-up), its refusals, and training with --pp-virtual 2 bit-identical to plain 1F1B
// in losses, gradient norms and saved weights, in fp32 and bf16, with --recompute full
// and with ZeRO-1, and across a resume that changes --pp-virtual. Run under mpirun at 2 and 4.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "parallel/process_groups.h"
#include "runtime/io/npy.h"
#include "runtime/model/model.h"
#include "runtime/train/pipeline_schedule.h"
#include "runtime/train/trainer.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/train/shared_dir.h"

namespace olmo2 {
namespace {

using parallel::test::message_of;
using parallel::test::world_rank;
using parallel::test::world_size;
using ::testing::HasSubstr;

// Every chunk's forwards and backwards run in micro-batch order, each (micro-batch,
// chunk) once each way, its backward after its forward; the warm-up is Megatron-LM's.
TEST(InterleavedSchedule, EachChunkRunsItsMicroBatchesInOrder) {
  for (int P : {2, 4}) {
    for (int V : {1, 2, 3}) {
      for (int64_t M : {int64_t{P}, int64_t{2} * P, int64_t{3} * P}) {
        for (int s = 0; s < P; ++s) {
          const std::vector<ScheduleOp> ops = pipeline_schedule(P, s, V, M);
          ASSERT_EQ(ops.size(), static_cast<size_t>(2 * M * V));
          std::vector<int64_t> next_f(V, 0), next_b(V, 0);
          int64_t warmup = 0;
          while (warmup < static_cast<int64_t>(ops.size()) && ops[warmup].forward) ++warmup;
          const int64_t want = V == 1 ? std::min<int64_t>(P - s - 1, M) : std::min<int64_t>(2 * (P - s - 1) + (V - 1) * P, M * V);
          // The first backward comes right after the warm-up and the first steady forward
          // (all forwards come first when the warm-up takes them all).
          EXPECT_EQ(warmup, want == M * V ? want : want + 1) << "P " << P << " V " << V << " M " << M << " stage " << s;
          int64_t live = 0, peak = 0;  // (micro-batch, chunk) activations held
          for (const ScheduleOp& op : ops) {
            live += op.forward ? 1 : -1, peak = std::max(peak, live);
            int64_t& next = op.forward ? next_f[op.chunk] : next_b[op.chunk];
            EXPECT_EQ(op.micro_batch, next) << (op.forward ? "forward" : "backward") << " of chunk " << op.chunk;
            ++next;
            if (!op.forward) EXPECT_LT(op.micro_batch, next_f[op.chunk]) << "backward before its forward";
          }
          // docs/architecture.md §5: at most min(w + 1, M·V) pairs in flight.
          EXPECT_EQ(peak, std::min<int64_t>(want + 1, M * V)) << "P " << P << " V " << V << " M " << M << " stage " << s;
        }
      }
    }
  }
  // Plain 1F1B at stage 0 of 2 with 3 micro-batches: F0, F1 B0, F2 B1, B2.
  const std::vector<ScheduleOp> plain = pipeline_schedule(2, 0, 1, 3);
  const std::vector<ScheduleOp> want = {{true, 0, 0},  {true, 1, 0},  {false, 0, 0},
                                        {true, 2, 0},  {false, 1, 0}, {false, 2, 0}};
  EXPECT_EQ(plain, want);
}

TEST(InterleavedSchedule, MicroBatchesNotAMultipleOfThePipelineAreRefused) {
  EXPECT_THAT(message_of<InputError>([] { pipeline_schedule(4, 0, 2, 6); }),
              HasSubstr("micro-batches per step (6) to be a multiple of pp 4"));
  EXPECT_NO_THROW(pipeline_schedule(4, 0, 1, 6));  // plain 1F1B takes any count
}

TEST(InterleavedSchedule, PlanRefusalsNameTheNumbers) {
  parallel::ModelShape s{8, 32, 4, 2, 8, 64, 131, false};
  EXPECT_THAT(message_of<InputError>([&] { parallel::make_partition_plan(s, 1, 4, 1, {}, 3); }),
              HasSubstr("num_hidden_layers 8 is not divisible by pp 4 × pp-virtual 3 = 12"));
  EXPECT_THAT(message_of<InputError>([&] { parallel::make_partition_plan(s, 1, 1, 1, {}, 2); }),
              HasSubstr("--pp-virtual 2 needs a pipeline (pp ≥ 2), the layout has pp 1"));
  EXPECT_THAT(message_of<InputError>([&] { parallel::make_partition_plan(s, 1, 2, 1, {4, 4}, 2); }),
              HasSubstr("cannot be combined with --pp-layers"));
  EXPECT_THAT(message_of<InputError>([&] { parallel::make_partition_plan(s, 1, 2, 1, {}, 0); }), HasSubstr("--pp-virtual 0"));
  const parallel::PartitionPlan p = parallel::make_partition_plan(s, 1, 2, 1, {}, 2);
  EXPECT_EQ(p.ranks[0].chunks, (std::vector<parallel::Range>{{0, 2}, {4, 6}}));
  EXPECT_EQ(p.ranks[1].chunks, (std::vector<parallel::Range>{{2, 4}, {6, 8}}));
  const ShardSpec sh = ShardSpec::from_plan(p, 1);
  EXPECT_EQ(sh.layer_count(), 4);
  EXPECT_EQ(sh.global_layer(2), 6);
  EXPECT_EQ(sh.local_layer(3), 1);
  EXPECT_EQ(sh.chunk_locals(1), (parallel::Range{2, 4}));
}

/// An 8-layer model (hidden 32, GQA 4/2, vocab 131) and 2048 tokens of a learnable pattern.
struct EightLayers {
  test::SharedDir dir;
  EightLayers() {
    if (world_rank() == 0) {
      nlohmann::json c = {{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", 131},
                          {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 8},
                          {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                          {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                          {"tie_word_embeddings", false}, {"eos_token_id", 130}, {"pad_token_id", 129}};
      std::ofstream(dir.file("config.json")) << c.dump(1);
      std::mt19937 rng(3);
      std::vector<uint32_t> ids(2048);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i % 64 == 0 ? 130 : rng() % 5 == 0 ? rng() % 128 : (i * 7) % 31);
      NpyWriter w(dir.file("tokens.npy"));
      w.append(ids);
      w.close();
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  TrainOptions options(const std::string& save) const {
    TrainOptions o;
    o.model_config = dir.file("config.json");
    o.data = {dir.file("tokens.npy")};
    o.seq_len = 16, o.global_batch = 8, o.micro_batch = 1, o.steps = 3;
    o.lr = 1e-2, o.warmup_steps = 1, o.seed = 5, o.z_loss = 1e-4, o.clip_grad = 1.0;
    o.log_format = "json";
    o.save_dir = dir.file(save);
    return o;
  }
};

struct TrainRun {
  std::vector<double> loss, grad_norm;
  std::map<std::string, std::vector<float>> weights;  // rank 0: the saved checkpoint's
};

TrainRun train(const TrainOptions& o, int tp, int pp, int dp) {
  auto groups = parallel::make_process_groups(parallel::Topology::make(world_size(), tp, pp, dp), 120.0);
  TrainRun r;
  {
    Trainer t(o, &groups);
    for (int i = 0; i < o.steps; ++i) {
      const StepRecord s = t.step();
      r.loss.push_back(s.loss), r.grad_norm.push_back(s.grad_norm);
    }
    t.save();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    Olmo2Model m = Olmo2Model::load(o.save_dir + "/step-00000003");
    ModelWeights g = zeros_like_weights(m.weights());
    for (const Parameter& p : list_parameters(m.mutable_weights(), g, m.config(), m.shard())) {
      r.weights[p.name].assign(p.value->f32(), p.value->f32() + p.numel());
    }
  }
  return r;
}

struct Case {
  int tp, pp, dp;
  std::string precision = "fp32", recompute = "none";
  int zero = 0;
  std::string name() const {
    return "tp" + std::to_string(tp) + "-pp" + std::to_string(pp) + "-dp" + std::to_string(dp) + "-" + precision +
           "-" + recompute + "-zero" + std::to_string(zero);
  }
};

// --pp-virtual 2 gives plain 1F1B's run bit for bit: every chunk's micro-batches run in
// the same order, so every sum does.
TEST(InterleavedTraining, EqualsPlainOneFOneBBitForBit) {
  const int world = world_size();
  std::vector<Case> cases;
  if (world == 2) {
    cases = {{1, 2, 1}, {1, 2, 1, "bf16"}, {1, 2, 1, "fp32", "full"}};
  } else if (world == 4) {
    cases = {{1, 4, 1}, {1, 2, 2, "fp32", "none", 1}, {2, 2, 1, "bf16"}};
  } else {
    GTEST_SKIP() << "runs at 2 and 4 ranks";
  }
  EightLayers m;
  for (const Case& c : cases) {
    TrainOptions o = m.options(c.name() + "-v1");
    o.precision = c.precision, o.recompute = c.recompute, o.zero_stage = c.zero;
    const TrainRun plain = train(o, c.tp, c.pp, c.dp);
    o.pp_virtual = 2, o.save_dir = m.dir.file(c.name() + "-v2");
    const TrainRun inter = train(o, c.tp, c.pp, c.dp);
    for (size_t i = 0; i < plain.loss.size(); ++i) {
      EXPECT_EQ(std::memcmp(&plain.loss[i], &inter.loss[i], sizeof(double)), 0)
          << c.name() << " step " << i + 1 << " loss " << plain.loss[i] << " vs " << inter.loss[i];
      EXPECT_EQ(std::memcmp(&plain.grad_norm[i], &inter.grad_norm[i], sizeof(double)), 0)
          << c.name() << " step " << i + 1 << " grad norm";
    }
    EXPECT_EQ(plain.weights.size(), inter.weights.size()) << c.name();
    for (const auto& [name, w] : plain.weights) {
      const std::vector<float>& got = inter.weights.at(name);
      ASSERT_EQ(got.size(), w.size()) << name;
      EXPECT_EQ(std::memcmp(got.data(), w.data(), w.size() * sizeof(float)), 0) << c.name() << " " << name;
    }
    if (world_rank() == 0) EXPECT_EQ(plain.weights.size(), 2u + 8u * 11u + 1u) << "the whole model was saved";
  }
}

/// `steps` steps of `o` at tp 1 × pp world, saving at the end; the step records.
std::vector<StepRecord> run_steps(const TrainOptions& o, int steps) {
  auto groups = parallel::make_process_groups(parallel::Topology::make(world_size(), 1, world_size(), 1), 120.0);
  Trainer t(o, &groups);
  std::vector<StepRecord> out;
  for (int i = 0; i < steps; ++i) out.push_back(t.step());
  t.save();
  return out;
}

// A checkpoint saved under --pp-virtual 2 resumes under plain 1F1B, and the reverse, and
// both continue the straight run bit for bit (the checkpoint names global layers).
TEST(InterleavedTraining, ResumeAcrossPpVirtualIsExact) {
  if (world_size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  EightLayers m;
  TrainOptions straight = m.options("straight");
  straight.steps = 4;
  const std::vector<StepRecord> want = run_steps(straight, 4);
  for (const auto& [before, after] : {std::pair{2, 1}, std::pair{1, 2}}) {
    TrainOptions first = m.options("moved-" + std::to_string(before));
    first.steps = 4, first.pp_virtual = before;
    run_steps(first, 2);
    TrainOptions second = first;
    second.resume = "auto", second.pp_virtual = after;
    const std::vector<StepRecord> got = run_steps(second, 2);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(std::memcmp(&got[i].loss, &want[2 + i].loss, sizeof(double)), 0)
          << "--pp-virtual " << before << " then " << after << ": step " << 3 + i;
      EXPECT_EQ(std::memcmp(&got[i].grad_norm, &want[2 + i].grad_norm, sizeof(double)), 0) << "step " << 3 + i;
    }
  }
}

// --pp-virtual with micro-batches per step that pp does not divide: refused on every rank.
TEST(InterleavedTraining, MicroBatchesNotAMultipleOfPpAreRefused) {
  if (world_size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  EightLayers m;
  TrainOptions o = m.options("refused");
  o.global_batch = 3, o.pp_virtual = 2;
  auto groups = parallel::make_process_groups(parallel::Topology::make(2, 1, 2, 1), 60.0);
  EXPECT_THAT(message_of<InputError>([&] { Trainer t(o, &groups); }),
              HasSubstr("micro-batches per step (--global-batch 3 / (--micro-batch 1 × dp 1) = 3) to be a multiple of pp 2"));
}

}  // namespace
}  // namespace olmo2
