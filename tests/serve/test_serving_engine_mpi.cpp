// The serving engine under mpirun -np 2 (docs/architecture.md §8), tp 2 and pp 2: a
// request's n > 1 choices — forked on rank 0's scheduler, their copy-on-write block
// copies applied by every rank — are bit for bit the answers of separate requests seeded
// choice_seed(seed, c) in the same layout (choices with prefix caching on, the separate
// requests with it off); greedy choices also equal one process's tokens.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/partition.h"
#include "parallel/process_groups.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/serve/choices_fixture.h"

namespace olmo2 {
namespace {

using test::Answer;

struct Layout {
  int tp, pp;
};

/// Serves `batch` on an engine over this rank's part of the layout: rank 0 submits and
/// collects (the answers), the other ranks execute the plans (an empty result).
std::vector<Answer> serve(const test::EngineModel& ckpt, const Tokenizer& tok, const Layout& lay,
                          const std::vector<CompletionParams>& batch, bool caching) {
  const int world = parallel::test::world_size(), rank = parallel::test::world_rank();
  const parallel::Topology topology = parallel::Topology::make(world, lay.tp, lay.pp, 1);
  const parallel::PartitionPlan plan = parallel::make_partition_plan(model_shape(ckpt.config), lay.tp, lay.pp, 1, {});
  parallel::ProcessGroups groups = parallel::make_process_groups(topology, 120);
  const Olmo2Model model = Olmo2Model::load(ckpt.path, ShardSpec::from_plan(plan, rank));
  EngineOptions o;
  o.scheduler = {.num_blocks = 160, .block_size = 4, .max_running = 16, .max_batch_tokens = 48,
                 .micro_batches = lay.pp, .prefix_caching = caching};
  EngineRanks ranks;
  ranks.world = groups.world.get();
  ranks.groups = ParallelContext{groups.tp.get(), groups.pp.get()};
  ranks.results_root = topology.rank(parallel::Coords{0, 0, lay.pp - 1});
  ServingEngine engine(model, rank == 0 ? &tok : nullptr, nullptr, o, ranks);
  std::vector<Answer> out;
  if (rank == 0) {
    test::EngineThread running(engine);
    out = test::run_batch(engine, batch);
  } else {
    engine.run();
  }
  groups.world->barrier();
  return out;
}

TEST(EngineChoicesUnderMpirun, EqualSeparateRequestsInTensorAndPipelineLayouts) {
  OLMO2_REQUIRE_WORLD(2);
  const test::EngineModel ckpt;  // each rank writes the same random checkpoint
  const Tokenizer tok = Tokenizer::from_file(test::source_path("data/dolma2-tokenizer.json"));
  const std::vector<CompletionParams> batch = test::choice_requests();
  std::vector<Answer> one;  // one process, on rank 0
  if (parallel::test::world_rank() == 0) {
    const Olmo2Model whole = Olmo2Model::load(ckpt.path, ShardSpec::whole(ckpt.config));
    ServingEngine engine(whole, &tok, nullptr, EngineOptions{.scheduler = {.num_blocks = 160, .block_size = 4,
                                                                          .max_running = 16, .max_batch_tokens = 48}},
                         EngineRanks{});
    test::EngineThread running(engine);
    one = test::run_batch(engine, batch);
  }
  for (const Layout lay : {Layout{2, 1}, Layout{1, 2}}) {
    const std::string what = "tp " + std::to_string(lay.tp) + " pp " + std::to_string(lay.pp);
    const std::vector<Answer> got = serve(ckpt, tok, lay, batch, true);
    const std::vector<Answer> alone = serve(ckpt, tok, lay, test::separately(batch), false);
    if (parallel::test::world_rank() != 0) continue;
    test::expect_choices_as_alone(batch, got, alone, what);
    // Greedy choices against one process: the same tokens (under TP the logits differ
    // in the last bits, so log-probabilities within 1e-4 and no claim on sampled draws).
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].sampling.temperature != 0) continue;
      for (size_t c = 0; c < got[i].choices.size(); ++c) {
        const test::ChoiceOut &a = got[i].choices[c], &b = one.at(i).choices.at(c);
        ASSERT_EQ(a.tokens.size(), b.tokens.size()) << what;
        for (size_t t = 0; t < a.tokens.size(); ++t) {
          EXPECT_EQ(a.tokens[t].id, b.tokens[t].id) << what << " request " << i << " choice " << c;
          EXPECT_NEAR(a.tokens[t].logprob, b.tokens[t].logprob, 1e-4) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace olmo2
