// Named activations and steering against transformers' forward hooks
// (tests/golden/make_activation_fixtures.py; docs/architecture.md §13), in every tensor- and
// pipeline-parallel layout that fills the world (1 process, tp 2, pp 2, tp 2 × pp 2, …), as
// one forward and as a prefill in two chunks through a KV cache, within 1e-4 (scaled by
// tests/trace/activation_fixture.h for entries beyond 50). Run under mpirun.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "parallel/partition.h"
#include "parallel/process_groups.h"
#include "runtime/io/safetensors.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/model.h"
#include "runtime/trace/activation_recorder.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/test_util.h"
#include "tests/trace/activation_fixture.h"

namespace olmo2::trace {
namespace {

using nlohmann::json;

const char* const kFixtures[] = {"mha-f32", "gqa-f32", "olmo3-gqa-f32"};

// Every per-layer and model-wide name the fixture holds.
const char* const kLayerNames[] = {"layer_input",       "attention_queries",  "attention_keys",
                                   "attention_values",  "attention_probabilities", "attention_head_outputs",
                                   "attention_premix",  "attention_output",   "layer_mid",
                                   "mlp_input",         "mlp_neurons",        "mlp_output",
                                   "layer_output"};
const char* const kModelNames[] = {"token_embeddings", "final_norm_output", "lm_head_output", "logits"};

struct Decoded {
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<int64_t> positions;
};

Decoded decode(const json& entry) {
  return {entry.at("shape").get<std::vector<int64_t>>(), test::read_values(entry),
          entry.at("positions").get<std::vector<int64_t>>()};
}

/// A fixture's steering case as the API's `interventions`, its vector base64-encoded.
json interventions_of(const test::ActivationFixture& fx, const json& c) {
  json out = json::array();
  const std::string name = c.at("case").get<std::string>();
  for (json iv : c.at("interventions")) {
    if (iv.at("type") == "add") {
      const std::vector<float> v = fx.values("vector." + name);
      std::vector<uint8_t> bytes(v.size() * 4);
      std::memcpy(bytes.data(), v.data(), bytes.size());
      iv["vector"] = base64_encode(bytes);
    }
    out.push_back(iv);
  }
  return out;
}

/// Every rank of the layout: the forward of fx.ids with `spec` traced, in one forward or
/// in two chunks through a KV cache; rank 0 returns the reads and the logits.
struct Traced {
  json reads;
  std::vector<float> logits;  // [T, V] on the world rank that holds them; gathered to rank 0
};

Traced run(const test::ActivationFixture& fx, const Olmo2Model& model, const ParallelContext& ctx, parallel::Communicator& world,
           const std::shared_ptr<const TraceSpec>& spec, bool chunked) {
  const int tp_rank = ctx.tp ? ctx.tp->rank() : 0;
  ActivationStore store(spec, model.config());
  std::vector<float> pieces, logits;
  const int64_t T = static_cast<int64_t>(fx.ids.size());
  auto forward = [&](int64_t begin, int64_t end, const KVCache* cache, const std::vector<int32_t>& table) {
    ActivationRecorder rec(model.config(), model.shard(), tp_rank, {TracedSequence{spec.get(), 0, 0}});
    ForwardOptions fo;
    fo.tap = &rec;
    fo.batch_invariant = cache != nullptr;
    TokenBatch batch;
    batch.tokens.emplace_back(fx.ids.begin() + begin, fx.ids.begin() + end);
    batch.start.push_back(begin);
    if (cache) batch.block_tables.emplace_back(table);
    const ForwardResult out = model.forward(batch, cache, fo, ctx);
    if (!out.logits.empty() && tp_rank == 0) {
      logits.insert(logits.end(), out.logits[0].f32(), out.logits[0].f32() + out.logits[0].numel());
    }
    pieces.insert(pieces.end(), rec.pieces().begin(), rec.pieces().end());
  };
  if (!chunked) {
    forward(0, T, nullptr, {});
  } else {
    const KVCache cache = KVCache::contiguous(model.config(), model.shard(), T, 4, model.device());
    const std::vector<int32_t> table = cache.contiguous_table(T);
    forward(0, 9, &cache, table);
    forward(9, T, &cache, table);
  }
  const std::vector<float> all = gather_pieces(world, pieces);
  // The logits to rank 0 (from the last stage's TP rank 0).
  const int64_t n = static_cast<int64_t>(logits.size());
  std::vector<int64_t> sizes(static_cast<size_t>(world.size()));
  world.all_gather(std::span<const int64_t>(&n, 1), std::span<int64_t>(sizes));
  Traced t;
  // With dp 1 exactly one rank holds the logits (the last stage's TP rank 0).
  if (world.rank() == 0) {
    store.add(all, 0);
    t.reads = store.result();
    t.logits = logits;
    for (int r = 1; r < world.size() && t.logits.empty(); ++r) {
      if (sizes[static_cast<size_t>(r)] == 0) continue;
      t.logits.resize(static_cast<size_t>(sizes[static_cast<size_t>(r)]));
      world.recv(host_view(t.logits), r, 99);
    }
  } else if (n > 0 && sizes[0] == 0) {
    world.send(host_view(logits), 0, 99);
  }
  return t;
}

std::vector<parallel::Layout> layouts(int world) {
  std::vector<parallel::Layout> out;
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      if (tp * pp == world) out.push_back({tp, pp, 1});
  return out;
}

// Names read reduced as well (norm and mean over every position): one of each layout.
const char* const kReduced[] = {"attention_queries", "attention_keys", "attention_probabilities", "attention_premix",
                                "mlp_neurons", "layer_output"};

json every_read() {
  json reads = json::array();
  for (const char* n : kModelNames) reads.push_back(n);
  for (const char* n : kLayerNames) reads.push_back(std::string("layers.*.") + n);
  for (const char* n : kReduced) {
    for (const char* r : {"norm", "mean"}) reads.push_back({{"name", std::string("layers.*.") + n}, {"reduce", r}});
  }
  reads.push_back({{"name", "logits"}, {"reduce", "norm"}});
  return reads;
}

/// The reference's reduction of a [A, B] or [A, B, C] tensor in nnterp's layout, from its
/// unreduced values: norm over the last axis, mean over the position axis (1 for
/// queries, keys, values and probabilities, whose head axis comes first; else 0).
std::vector<float> reduce_reference(const std::vector<float>& v, std::vector<int64_t> shape, int pos_axis, bool norm) {
  if (shape.size() == 2) shape.insert(shape.begin(), 1), ++pos_axis;
  const int64_t A = shape[0], B = shape[1], C = shape[2];
  std::vector<float> out;
  if (norm) {
    for (int64_t a = 0; a < A; ++a)
      for (int64_t b = 0; b < B; ++b) {
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += double(v[(a * B + b) * C + c]) * v[(a * B + b) * C + c];
        out.push_back(static_cast<float>(std::sqrt(ss)));
      }
    return out;
  }
  const int64_t outer = pos_axis == 1 ? A : 1, P = pos_axis == 1 ? B : A, inner = pos_axis == 1 ? C : B * C;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double s = 0;
      for (int64_t p = 0; p < P; ++p) s += v[(o * P + p) * inner + i];
      out.push_back(static_cast<float>(s / double(P)));
    }
  return out;
}

TEST(ActivationsGolden, EveryNameMatchesTransformersHooksInEveryLayout) {
  const int world_n = parallel::test::world_size();
  int checked = 0;
  for (const char* name : kFixtures) {
    const test::ActivationFixture fx(name);
    const Olmo2Model whole = Olmo2Model::load(fx.dir);
    const int64_t L = whole.config().num_hidden_layers;
    const json reads = every_read();
    auto spec = std::make_shared<TraceSpec>(parse_trace_request(&reads, nullptr, whole.config()));
    spec->prompt_len = fx.meta.at("prompt_ids").size();
    for (const parallel::Layout& lay : layouts(world_n)) {
      parallel::PartitionPlan plan;
      try {
        plan = parallel::make_partition_plan(model_shape(whole.config()), lay.tp, lay.pp, lay.dp);
      } catch (const InputError&) {
        continue;
      }
      auto groups = parallel::make_process_groups(parallel::Topology::make(world_n, lay.tp, lay.pp, 1), 60.0);
      const Olmo2Model model = Olmo2Model::load(fx.dir, ShardSpec::from_plan(plan, groups.world->rank()));
      const ParallelContext ctx{groups.tp.get(), groups.pp.get()};
      for (bool chunked : {false, true}) {
        const Traced t = run(fx, model, ctx, *groups.world, spec, chunked);
        if (groups.world->rank() != 0) continue;
        const std::string where = std::string(name) + " tp " + std::to_string(lay.tp) + " pp " +
                                  std::to_string(lay.pp) + (chunked ? " chunked" : "");
        std::vector<std::string> keys;
        for (const char* n : kModelNames) keys.push_back(n);
        for (int64_t l = 0; l < L; ++l)
          for (const char* n : kLayerNames) keys.push_back("layers." + std::to_string(l) + "." + n);
        for (const std::string& key : keys) {
          ASSERT_TRUE(t.reads.contains(key)) << key << " " << where;
          const Decoded got = decode(t.reads.at(key));
          std::vector<int64_t> shape;
          const std::vector<float> want = fx.values("read." + key, &shape);
          EXPECT_EQ(got.shape, shape) << key << " " << where;
          EXPECT_EQ(got.positions, (std::vector<int64_t>{0, static_cast<int64_t>(fx.ids.size())})) << key;
          EXPECT_LE(test::scaled_max_diff(got.values, want), 1e-4) << key << " " << where;
          ++checked;
        }
        // The reductions against the reference's own rows reduced here.
        std::vector<std::string> reduced = {"logits"};
        for (int64_t l = 0; l < L; ++l)
          for (const char* n : kReduced) reduced.push_back("layers." + std::to_string(l) + "." + n);
        for (const std::string& key : reduced) {
          std::vector<int64_t> shape;
          const std::vector<float> want = fx.values("read." + key, &shape);
          const bool heads_first = key.find("queries") != std::string::npos || key.find("keys") != std::string::npos ||
                                   key.find("probabilities") != std::string::npos;
          for (bool norm : {true, false}) {
            if (!norm && key == "logits") continue;
            const std::string k = key + (norm ? ":norm" : ":mean");
            ASSERT_TRUE(t.reads.contains(k)) << k;
            EXPECT_LE(test::scaled_max_diff(decode(t.reads.at(k)).values, reduce_reference(want, shape, heads_first ? 1 : 0, norm)),
                      1e-4)
                << k << " " << where;
          }
        }
        // The residual identity on our own reads: input + attention + MLP = output.
        for (int64_t l = 0; l < L; ++l) {
          const std::string p = "layers." + std::to_string(l) + ".";
          const Decoded x = decode(t.reads.at(p + "layer_input")), a = decode(t.reads.at(p + "attention_output"));
          const Decoded m = decode(t.reads.at(p + "mlp_output")), y = decode(t.reads.at(p + "layer_output"));
          double worst = 0;
          for (size_t i = 0; i < y.values.size(); ++i) {
            worst = std::max(worst, double(::olmo2::test::abs_diff(x.values[i] + a.values[i] + m.values[i], y.values[i])));
          }
          EXPECT_LE(worst, 1e-5) << p << " " << where;
        }
      }
      groups.world->barrier();
    }
  }
  if (parallel::test::world_rank() == 0) {
    EXPECT_GT(checked, 0);
  }
}

TEST(ActivationsGolden, SteeringMatchesTheHookedReferenceInEveryLayout) {
  const int world_n = parallel::test::world_size();
  for (const char* name : kFixtures) {
    const test::ActivationFixture fx(name);
    const Olmo2Model whole = Olmo2Model::load(fx.dir);
    const std::string last = "layers." + std::to_string(whole.config().num_hidden_layers - 1) + ".layer_output";
    // Layer 0's head outputs and o_proj input too: an ablation zeroes the head at o_proj's
    // input (attention_premix), after the attention function's output
    // (attention_head_outputs), as transformers' hook does.
    const json reads = json::array({last, "layers.0.attention_head_outputs", "layers.0.attention_premix"});
    for (const parallel::Layout& lay : layouts(world_n)) {
      parallel::PartitionPlan plan;
      try {
        plan = parallel::make_partition_plan(model_shape(whole.config()), lay.tp, lay.pp, lay.dp);
      } catch (const InputError&) {
        continue;
      }
      auto groups = parallel::make_process_groups(parallel::Topology::make(world_n, lay.tp, lay.pp, 1), 60.0);
      const Olmo2Model model = Olmo2Model::load(fx.dir, ShardSpec::from_plan(plan, groups.world->rank()));
      const ParallelContext ctx{groups.tp.get(), groups.pp.get()};
      const std::vector<float> unsteered = fx.values("read.logits");
      for (const json& c : fx.meta.at("steering")) {
        const std::string cs = c.at("case").get<std::string>();
        const json ivs = interventions_of(fx, c);
        auto spec = std::make_shared<TraceSpec>(parse_trace_request(&reads, &ivs, whole.config()));
        spec->prompt_len = fx.meta.at("prompt_ids").size();
        for (bool chunked : {false, true}) {
          const Traced t = run(fx, model, ctx, *groups.world, spec, chunked);
          if (groups.world->rank() != 0) continue;
          const std::string where = std::string(name) + " " + cs + " tp " + std::to_string(lay.tp) + " pp " +
                                    std::to_string(lay.pp) + (chunked ? " chunked" : "");
          const std::vector<float> want = fx.values("steer." + cs + ".logits");
          ASSERT_EQ(t.logits.size(), want.size()) << where;
          EXPECT_LE(test::scaled_max_diff(t.logits, want), 1e-4) << where;
          EXPECT_GT(test::scaled_max_diff(t.logits, unsteered), 1e-2) << "the steering must move the logits: " << where;
          EXPECT_LE(test::scaled_max_diff(decode(t.reads.at(last)).values,
                             fx.values("steer." + cs + ".layer_output")),
                    1e-4)
              << where;
          if (cs != "ablate_head" && cs != "combined") continue;  // their layer 0 sees only the ablation
          const std::vector<float> heads = fx.values("read.layers.0.attention_head_outputs");
          std::vector<float> zeroed = heads;  // [T, H, hd] with head 1 zero
          const int64_t hd = whole.config().head_dim, H = whole.config().num_attention_heads;
          for (size_t row = 0; row < zeroed.size() / static_cast<size_t>(H * hd); ++row) {
            std::fill_n(zeroed.begin() + static_cast<int64_t>(row) * H * hd + hd, hd, 0.0f);
          }
          EXPECT_LE(test::scaled_max_diff(decode(t.reads.at("layers.0.attention_head_outputs")).values, heads), 1e-4) << where;
          EXPECT_LE(test::scaled_max_diff(decode(t.reads.at("layers.0.attention_premix")).values, zeroed), 1e-4) << where;
          EXPECT_GT(test::scaled_max_diff(heads, zeroed), 1e-2) << "head 1 must have something to zero";
        }
      }
      groups.world->barrier();
    }
  }
}

}  // namespace
}  // namespace olmo2::trace
