// The serving engine at tp 2 and at pp 2 (docs/architecture.md §8) with the request fields
// of token selection: prompt logprobs of a prompt longer than the step budget (chunked
// prefill) against transformers and against the one-process engine — the same bits at
// pp 2, within fp32 rounding at tp 2 (split row-parallel sums) — next to a greedy request
// with logprobs, a logit_bias of −100 on the greedy token, stop token ids with
// min_tokens, penalties, and two structured-output constraints (the allowed-token mask
// crossing ranks in the plan, each TP rank masking its own slice: docs/architecture.md
// §8, "Structured outputs"), whose outputs are also checked against std::regex. Run under
// mpirun -np 2.
#include <gtest/gtest.h>

#include <regex>

#include "parallel/partition.h"
#include "parallel/process_groups.h"
#include "runtime/structured/constraint.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/serve/engine_fixture.h"

namespace olmo2 {
namespace {

using test::Outcome;

SchedulerOptions options(int32_t micro_batches) {
  return SchedulerOptions{.num_blocks = 64, .block_size = 4, .max_running = 4, .max_batch_tokens = 16,
                          .micro_batches = micro_batches};
}

std::vector<CompletionParams> requests(const test::PromptReference& ref) {
  const std::vector<int32_t> other(ref.prompt.rbegin(), ref.prompt.rbegin() + 23);
  std::vector<CompletionParams> r;
  r.push_back(test::scoring_request(ref.prompt, 0, 3));  // echo scoring only
  r.push_back(test::scoring_request(ref.prompt, 4, 2));  // scoring and generating
  r.push_back(test::greedy_request(other, 6, 2));
  r.push_back(test::greedy_request(ref.prompt, 2, 1));  // the greedy token biased away
  r.back().adjust.logit_bias = {{ref.greedy[0], -100.0f}};
  r.push_back(test::greedy_request(ref.prompt, 5));     // not stopped by greedy[0] at once: banned
  r.back().stop_token_ids = {ref.greedy[0], ref.greedy[2]};
  r.back().min_tokens = 1;
  r.push_back(test::greedy_request(ref.prompt, 5, 2));  // penalties: prompt ids and output counts
  r.back().adjust.repetition_penalty = 1.6, r.back().adjust.frequency_penalty = 0.7;
  r.back().adjust.presence_penalty = 0.3;
  // Constrained (the model's 202 ids are single bytes, no space among them): a word and
  // a number, then a choice with logprobs (the raw distribution's) and a penalty on top.
  r.push_back(test::greedy_request(other, 12, 2));
  r.back().grammar = structured::Grammar::parse(R"(root ::= [a-z]{2,5} "-" ("0" | [1-9] [0-9]{0,3}) ".")");
  r.push_back(test::greedy_request(ref.prompt, 8, 3));
  r.back().grammar = structured::Grammar::parse(R"(root ::= "yes" | "no" | "maybe")");
  r.back().adjust.repetition_penalty = 1.3;
  return r;
}

/// The outcomes of requests() in the layout (tp, pp) on rank 0 (empty elsewhere).
std::vector<Outcome> serve_in_layout(int tp, int pp, const Tokenizer* tok, const test::PromptReference& ref) {
  const int world = parallel::test::world_size();
  const std::string dir = test::prompt_logprobs_model();
  const ModelConfig config = ModelConfig::load(dir);
  const parallel::Topology topology = parallel::Topology::make(world, tp, pp, 1);
  const parallel::PartitionPlan plan = parallel::make_partition_plan(model_shape(config), tp, pp, 1);
  parallel::ProcessGroups groups = parallel::make_process_groups(topology, 60.0);
  const Olmo2Model model = Olmo2Model::load(dir, ShardSpec::from_plan(plan, groups.world->rank()));
  EngineRanks ranks;
  ranks.world = groups.world.get();
  ranks.groups = ParallelContext{groups.tp.get(), groups.pp.get()};
  ranks.results_root = topology.rank(parallel::Coords{0, 0, pp - 1});
  std::vector<Outcome> out = test::serve_all(model, tok, ranks, options(pp), requests(ref));
  groups.world->barrier();
  return out;
}

void check(const std::vector<Outcome>& got, const std::vector<Outcome>& one, const test::PromptReference& ref,
           bool same_bits, const std::string& layout) {
  SCOPED_TRACE(layout);
  ASSERT_EQ(got.size(), one.size());
  test::expect_prompt_logprobs(got[0].prompt_tokens, ref, 3, 3e-5, layout + ", echo only");
  test::expect_prompt_logprobs(got[1].prompt_tokens, ref, 2, 3e-5, layout + ", echo and generation");
  EXPECT_EQ(got[0].finish_reason, "length");
  EXPECT_TRUE(got[0].tokens.empty());
  for (size_t r = 0; r < got.size(); ++r) {
    SCOPED_TRACE("request " + std::to_string(r));
    EXPECT_EQ(got[r].finish_reason, one[r].finish_reason);
    EXPECT_EQ(got[r].text, one[r].text);
    ASSERT_EQ(got[r].tokens.size(), one[r].tokens.size());
    for (size_t i = 0; i < got[r].tokens.size(); ++i) EXPECT_EQ(got[r].tokens[i].id, one[r].tokens[i].id);
    const auto a = test::bits(got[r].prompt_tokens), b = test::bits(one[r].prompt_tokens);
    const auto c = test::bits(got[r].tokens), d = test::bits(one[r].tokens);
    if (same_bits) {
      EXPECT_EQ(a, b) << "prompt logprobs, bit for bit";
      EXPECT_EQ(c, d) << "tokens and logprobs, bit for bit";
      continue;
    }
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(c.size(), d.size());
    double worst = 0;
    auto diff = [](uint32_t x, uint32_t y) { return std::fabs(double(std::bit_cast<float>(x)) - std::bit_cast<float>(y)); };
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      worst = std::max(worst, diff(a[i].second, b[i].second));
    }
    for (size_t i = 0; i < c.size(); ++i) {
      EXPECT_EQ(c[i].first, d[i].first);
      worst = std::max(worst, diff(c[i].second, d[i].second));
    }
    EXPECT_LE(worst, 1e-5) << "log-probabilities against one process";
    std::cout << "[" << layout << "] request " << r << ": largest |log-probability − one process's| " << worst << "\n";
  }
  // The greedy token biased away, the stop token banned by min_tokens.
  ASSERT_EQ(got[3].tokens.size(), 2u);
  EXPECT_EQ(got[3].tokens[0].id, ref.top.back()[1].first);
  ASSERT_FALSE(got[4].tokens.empty());
  EXPECT_EQ(got[4].tokens[0].id, ref.top.back()[1].first);
  EXPECT_EQ(got[6].finish_reason, "stop");
  EXPECT_TRUE(std::regex_match(got[6].text, std::regex("[a-z]{2,5}-(0|[1-9][0-9]{0,3})\\."))) << got[6].text;
  EXPECT_EQ(got[7].finish_reason, "stop");
  EXPECT_TRUE(std::regex_match(got[7].text, std::regex("yes|no|maybe"))) << got[7].text;
}

TEST(EngineSelectionMpi, PromptLogprobsAndAdjustmentsInTp2AndPp2) {
  OLMO2_REQUIRE_WORLD(2);
  const test::PromptReference ref = test::load_prompt_reference();
  const int rank = parallel::test::world_rank();
  std::unique_ptr<Tokenizer> tok;
  std::vector<Outcome> one;
  if (rank == 0) {
    tok = std::make_unique<Tokenizer>(Tokenizer::from_file(test::source_path("data/dolma2-tokenizer.json")));
    const Olmo2Model whole = Olmo2Model::load(test::prompt_logprobs_model());
    one = test::serve_all(whole, tok.get(), EngineRanks{}, options(1), requests(ref));
    test::expect_prompt_logprobs(one[0].prompt_tokens, ref, 3, 3e-5, "one process");
  }
  const std::vector<Outcome> pp2 = serve_in_layout(1, 2, tok.get(), ref);
  const std::vector<Outcome> tp2 = serve_in_layout(2, 1, tok.get(), ref);
  if (rank != 0) return;
  check(pp2, one, ref, true, "pp 2");
  check(tp2, one, ref, false, "tp 2");
}

}  // namespace
}  // namespace olmo2
