// Named activations and steering through the serving engine (docs/architecture.md §13),
// in one process and under mpirun at tp 2 and pp 2: a request's reads over its prompt and
// generated positions equal transformers' hooks (tests/golden/make_activation_fixtures.py),
// chunked prefill and all; steered greedy decoding equals transformers' with the same
// hook; traced, steered and plain requests served together return exactly what each
// returns alone; a steered request never reuses an unsteered request's cached blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>

#include "parallel/partition.h"
#include "parallel/process_groups.h"
#include "runtime/io/safetensors.h"
#include "runtime/serve/serving_engine.h"
#include "runtime/trace/trace_spec.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/test_util.h"
#include "tests/trace/activation_fixture.h"

namespace olmo2::trace {
namespace {

using nlohmann::json;

struct Out {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  json activations;
  std::string error;
};

Out collect(ServeRequest& r) {
  Out o;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < end) {
    const std::optional<CompletionChunk> c = r.next(std::chrono::milliseconds(100));
    if (!c) continue;
    if (!c->error.empty()) return o.error = c->error, o;
    for (const SelectedToken& t : c->tokens) o.ids.push_back(t.id), o.logprobs.push_back(t.logprob);
    if (!c->finish_reason.empty()) {
      o.activations = c->activations;
      return o;
    }
  }
  ADD_FAILURE() << "request " << r.id() << " did not finish";
  return o;
}

CompletionParams request(const test::ActivationFixture& fx, const ModelConfig& c, const json* reads, const json* interventions) {
  CompletionParams p;
  p.prompt = fx.prompt();
  p.max_tokens = 6;
  p.sampling.temperature = 0;
  p.sampling.seed = 1;
  p.ignore_eos = true;
  p.want_logprobs = true;
  if (reads || interventions) {
    auto spec = std::make_shared<TraceSpec>(parse_trace_request(reads, interventions, c));
    spec->prompt_len = static_cast<int64_t>(p.prompt.size());
    p.trace = spec;
  }
  return p;
}

/// Serves the batches one after another (each submitted at once) on one engine over
/// this rank's part of the layout; rank 0 returns the answers.
std::vector<std::vector<Out>> serve(const test::ActivationFixture& fx, int tp, int pp,
                                    const std::vector<std::vector<CompletionParams>>& batches) {
  const int world = parallel::test::world_size(), rank = parallel::test::world_rank();
  const Tokenizer tok = Tokenizer::from_file(test::source_path("data/dolma2-tokenizer.json"));
  const ModelConfig config = ModelConfig::load(fx.dir);
  const parallel::Topology topology = parallel::Topology::make(world, tp, pp, 1);
  const parallel::PartitionPlan plan = parallel::make_partition_plan(model_shape(config), tp, pp, 1, {});
  parallel::ProcessGroups groups = parallel::make_process_groups(topology, 120);
  const Olmo2Model model = Olmo2Model::load(fx.dir, ShardSpec::from_plan(plan, rank));
  EngineOptions o;
  o.scheduler = {.num_blocks = 64, .block_size = 4, .max_running = 8, .max_batch_tokens = 8,
                 .micro_batches = pp, .prefix_caching = true};
  EngineRanks ranks;
  if (world > 1) {
    ranks.world = groups.world.get();
    ranks.groups = ParallelContext{groups.tp.get(), groups.pp.get()};
    ranks.results_root = topology.rank(parallel::Coords{0, 0, pp - 1});
  }
  ServingEngine engine(model, rank == 0 ? &tok : nullptr, nullptr, o, ranks);
  std::vector<std::vector<Out>> out;
  if (rank == 0) {
    std::thread loop([&] { engine.run(); });
    for (const auto& batch : batches) {
      std::vector<std::shared_ptr<ServeRequest>> rs;
      for (const CompletionParams& p : batch) rs.push_back(engine.submit(p));
      out.emplace_back();
      for (auto& r : rs) out.back().push_back(collect(*r));
    }
    engine.request_stop();
    loop.join();
  } else {
    engine.run();
  }
  groups.world->barrier();
  return out;
}

struct Layout {
  int tp, pp;
};

std::vector<Layout> layouts() {
  if (parallel::test::world_size() == 1) return {{1, 1}};
  if (parallel::test::world_size() == 2) return {{2, 1}, {1, 2}};
  return {};
}

json every_read() {
  json r = json::array({"token_embeddings", "final_norm_output", "logits"});
  for (const char* n : {"layer_input", "attention_queries", "attention_keys", "attention_values",
                        "attention_probabilities", "attention_premix", "attention_output", "layer_mid",
                        "mlp_neurons", "mlp_output", "layer_output"}) {
    r.push_back(std::string("layers.*.") + n);
  }
  r.push_back(json{{"name", "layers.*.layer_output"}, {"reduce", "norm"}, {"positions", "prompt"}});
  r.push_back(json{{"name", "layers.*.layer_output"}, {"reduce", "mean"}, {"positions", "generated"}});
  return r;
}

json steering(const test::ActivationFixture& fx) {
  const std::vector<float> v = fx.values("vector.add_layer_output");
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return json::array({{{"type", "add"}, {"name", "layers.1.layer_output"}, {"coefficient", 3.0},
                       {"vector", base64_encode(b)}, {"positions", "all"}}});
}

TEST(EngineActivations, ReadsAndSteeringMatchTransformersAndConcurrencyChangesNothing) {
  for (const char* name : {"gqa-f32", "olmo3-gqa-f32"}) {
    const test::ActivationFixture fx(name);
    const ModelConfig config = ModelConfig::load(fx.dir);
    const json reads = every_read(), ivs = steering(fx);
    const CompletionParams traced = request(fx, config, &reads, nullptr);
    const CompletionParams steered = request(fx, config, nullptr, &ivs);
    const CompletionParams plain = request(fx, config, nullptr, nullptr);
    CompletionParams other = plain;
    other.prompt = {5, 9, 17, 33, 2, 8, 40};
    for (const Layout lay : layouts()) {
      const std::string where = std::string(name) + " tp " + std::to_string(lay.tp) + " pp " + std::to_string(lay.pp);
      // Alone, one after another; then all together; then plain before steered (cached blocks).
      const auto got = serve(fx, lay.tp, lay.pp,
                             {{traced}, {steered}, {plain}, {other}, {traced, plain, steered, other}, {plain}, {steered}});
      if (parallel::test::world_rank() != 0) continue;
      ASSERT_EQ(got.size(), 7u);
      const Out &t = got[0][0], &s = got[1][0], &u = got[2][0], &x = got[3][0];
      ASSERT_TRUE(t.error.empty() && s.error.empty()) << t.error << s.error;
      EXPECT_EQ(t.ids, fx.meta.at("greedy_ids").get<std::vector<int32_t>>()) << where;
      EXPECT_EQ(u.ids, t.ids) << "reading changes nothing: " << where;
      const json& steer_case = fx.meta.at("steering").at(0);
      ASSERT_EQ(steer_case.at("case"), "add_layer_output");
      EXPECT_EQ(s.ids, steer_case.at("greedy_ids").get<std::vector<int32_t>>()) << where;
      // Every per-position read against transformers' hooks over prompt + fed tokens.
      const int64_t T = static_cast<int64_t>(fx.meta.at("sequence_ids").size());
      for (const auto& [key, entry] : t.activations.items()) {
        if (key.find(':') != std::string::npos) continue;
        EXPECT_EQ(entry.at("positions"), json::array({0, T})) << key << " " << where;
        EXPECT_LE(test::scaled_max_diff(test::read_values(entry), fx.values("read." + key)), 1e-4) << key << " " << where;
      }
      EXPECT_EQ(t.activations.size(), 3 + config.num_hidden_layers * 13) << where;
      // The reductions against the reference rows: prompt norms, generated means.
      const int64_t P = static_cast<int64_t>(fx.prompt().size()), h = config.hidden_size;
      for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        const std::string key = "layers." + std::to_string(l) + ".layer_output";
        const std::vector<float> rows = fx.values("read." + key);
        std::vector<float> norms, mean(static_cast<size_t>(h), 0.0f);
        for (int64_t p = 0; p < T; ++p) {
          double ss = 0;
          for (int64_t j = 0; j < h; ++j) ss += double(rows[p * h + j]) * rows[p * h + j];
          if (p < P) norms.push_back(static_cast<float>(std::sqrt(ss)));
          for (int64_t j = 0; j < h && p >= P; ++j) mean[j] += rows[p * h + j] / float(T - P);
        }
        EXPECT_LE(test::scaled_max_diff(test::read_values(t.activations.at(key + ":norm")), norms), 1e-4) << where;
        EXPECT_EQ(t.activations.at(key + ":norm").at("positions"), json::array({0, P}));
        EXPECT_LE(test::scaled_max_diff(test::read_values(t.activations.at(key + ":mean")), mean), 1e-4) << where;
        EXPECT_EQ(t.activations.at(key + ":mean").at("positions"), json::array({P, T}));
      }
      // Together: each exactly as alone (ids, log-probability bits, activation bytes).
      const std::vector<Out>& all = got[4];
      ASSERT_EQ(all.size(), 4u);
      const Out* alone[] = {&t, &u, &s, &x};
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(all[i].ids, alone[i]->ids) << where << " request " << i;
        EXPECT_EQ(0, std::memcmp(all[i].logprobs.data(), alone[i]->logprobs.data(), 4 * all[i].logprobs.size()))
            << where << " request " << i;
      }
      EXPECT_EQ(all[0].activations, t.activations) << where;
      // The steered request after a plain one of the same prompt: its own blocks.
      EXPECT_EQ(got[6][0].ids, s.ids) << where;
      EXPECT_EQ(0, std::memcmp(got[6][0].logprobs.data(), s.logprobs.data(), 4 * s.logprobs.size())) << where;
    }
  }
}

}  // namespace
}  // namespace olmo2::trace

namespace olmo2::trace {
namespace {

// A later request whose prompt holds an earlier steered answer (a chat's next turn), with
// the same interventions on "prompt" (or "generated") positions, steers other absolute
// positions than the earlier one did: it must not reuse the earlier request's cached
// blocks, and answers as on a fresh server.
TEST(EngineActivations, RelativePositionsNeverReuseBlocksSteeredForAnotherPromptLength) {
  const test::ActivationFixture fx("gqa-f32");
  const ModelConfig config = ModelConfig::load(fx.dir);
  for (const char* positions : {"prompt", "generated"}) {
    json ivs = steering(fx);
    ivs[0]["positions"] = positions;
    const CompletionParams first = request(fx, config, nullptr, &ivs);
    for (const Layout lay : layouts()) {
      const std::string where = std::string(positions) + " tp " + std::to_string(lay.tp) + " pp " +
                                std::to_string(lay.pp);
      const auto a = serve(fx, lay.tp, lay.pp, {{first}});
      std::vector<int32_t> answer = a.empty() ? std::vector<int32_t>{} : a[0][0].ids;
      int n = static_cast<int>(answer.size());  // every rank builds the same next turn
      MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
      answer.resize(static_cast<size_t>(n));
      MPI_Bcast(answer.data(), n, MPI_INT32_T, 0, MPI_COMM_WORLD);
      CompletionParams next = first;
      next.prompt.insert(next.prompt.end(), answer.begin(), answer.end());
      next.max_tokens = 3;
      next.trace = std::make_shared<TraceSpec>(parse_trace_request(nullptr, &ivs, config));
      std::const_pointer_cast<TraceSpec>(next.trace)->prompt_len = static_cast<int64_t>(next.prompt.size());
      const auto after = serve(fx, lay.tp, lay.pp, {{first}, {next}});
      const auto fresh = serve(fx, lay.tp, lay.pp, {{next}});
      if (parallel::test::world_rank() != 0) continue;
      ASSERT_EQ(after.size(), 2u);
      EXPECT_EQ(after[0][0].ids, a[0][0].ids) << where;
      EXPECT_EQ(after[1][0].ids, fresh[0][0].ids) << where;
      EXPECT_EQ(0, std::memcmp(after[1][0].logprobs.data(), fresh[0][0].logprobs.data(),
                               4 * fresh[0][0].logprobs.size()))
          << where;
    }
  }
}

}  // namespace
}  // namespace olmo2::trace
