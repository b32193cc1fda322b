// The serving engine with prefix caching and n > 1 choices (docs/architecture.md §8), in
// one process: a request's choices are bit for bit the answers of separate requests
// seeded choice_seed(seed, c) — greedy and sampled, prompts whose last block is partial,
// full or a single token, max_tokens 1 — with caching on and off; requests sharing a
// system prompt get the same bits with caching on (hits counted) as off; a prompt to
// score is computed whole even when cached; a cancelled request ends every choice; and the same choices on the device (a GPU, label gpu, or
// the emulated device, label unit, there against the CPU bit for bit).
// Under bf16, bf16 KV pools give the bits of f32 pools, on the CPU and on the device.
#include <gtest/gtest.h>

#include <random>

#include "ops/device_emulation.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/serve/choices_fixture.h"

namespace olmo2 {
namespace {

using test::Answer;
using test::choice_requests;
using test::EngineThread;
using test::expect_choices_as_alone;
using test::ids;
using test::request;
using test::separately;

const test::EngineModel& checkpoint() {
  static const test::EngineModel m;
  return m;
}

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(test::source_path("data/dolma2-tokenizer.json"));
  return t;
}

EngineOptions options(bool caching) {
  EngineOptions o;
  o.scheduler = {.num_blocks = 160, .block_size = 4, .max_running = 16, .max_batch_tokens = 48,
                 .prefix_caching = caching};
  return o;
}

/// Serves `batch` (all submitted at once) on a fresh engine over `model`, with KV pools of
/// `kv_dtype` (nullopt: the precision's).
std::vector<Answer> serve(const Olmo2Model& model, const std::vector<CompletionParams>& batch, bool caching,
                          monitoring::ServeMetrics* metrics = nullptr, std::optional<DType> kv_dtype = std::nullopt) {
  EngineOptions o = options(caching);
  o.kv_dtype = kv_dtype;
  ServingEngine engine(model, &tokenizer(), metrics, o, EngineRanks{});
  EngineThread running(engine);
  return test::run_batch(engine, batch);
}

class EngineChoices : public ::testing::TestWithParam<bool> {};

TEST_P(EngineChoices, EqualSeparateRequestsWithTheirChoiceSeeds) {
  const Olmo2Model model = Olmo2Model::load(checkpoint().path, ShardSpec::whole(checkpoint().config));
  const std::vector<CompletionParams> batch = choice_requests();
  const std::vector<Answer> got = serve(model, batch, GetParam());
  const std::vector<Answer> alone = serve(model, separately(batch), GetParam());
  expect_choices_as_alone(batch, got, alone, GetParam() ? "caching on" : "caching off");
}

INSTANTIATE_TEST_SUITE_P(CachingOnAndOff, EngineChoices, ::testing::Bool());

TEST(EngineChoices, OnTheDevice) {
  OLMO2_REQUIRE_DEVICE();
  const Olmo2Model model =
      Olmo2Model::load(checkpoint().path, ShardSpec::whole(checkpoint().config), std::nullopt, Device::CUDA);
  const std::vector<CompletionParams> batch = choice_requests();
  const std::vector<Answer> got = serve(model, batch, true);
  expect_choices_as_alone(batch, got, serve(model, separately(batch), false), "device");
  if (!ops::device_emulated()) return;
  // The emulated device runs the CPU kernels: the CPU's bits.
  const Olmo2Model cpu = Olmo2Model::load(checkpoint().path, ShardSpec::whole(checkpoint().config));
  const std::vector<Answer> want = serve(cpu, batch, true);
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t c = 0; c < want[i].choices.size(); ++c) {
      test::expect_same_bits(got[i].choices.at(c), want[i].choices[c], "emulated vs CPU, request " + std::to_string(i));
    }
  }
}

// A bf16 KV cache (docs/architecture.md §3.2) under bf16, where the keys and values are
// bf16 numbers already: every choice of every request the bits f32 pools give, on the CPU
// and on the device (whose paged attention reads the bf16 pools itself).
void expect_bf16_pools_exact(Device device) {
  const Olmo2Model model =
      Olmo2Model::load(checkpoint().path, ShardSpec::whole(checkpoint().config), Precision::BF16, device);
  const std::vector<CompletionParams> batch = choice_requests();
  const std::vector<Answer> f32 = serve(model, batch, true, nullptr, DType::F32);
  const std::vector<Answer> bf16 = serve(model, batch, true, nullptr, DType::BF16);
  ASSERT_EQ(bf16.size(), f32.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    ASSERT_EQ(bf16[i].choices.size(), f32[i].choices.size());
    for (size_t c = 0; c < f32[i].choices.size(); ++c) {
      test::expect_same_bits(bf16[i].choices[c], f32[i].choices[c], "bf16 vs f32 pools, request " + std::to_string(i));
    }
  }
}

TEST(EngineKvCacheDtype, Bf16PoolsGiveTheBitsOfF32PoolsUnderBf16) { expect_bf16_pools_exact(Device::CPU); }

TEST(EngineKvCacheDtype, Bf16PoolsOnTheDevice) {
  OLMO2_REQUIRE_DEVICE();
  expect_bf16_pools_exact(Device::CUDA);
}

/// 37 tokens of a system prompt, then 3 … 9 of a request's own.
std::vector<CompletionParams> shared_prefix_requests() {
  const std::vector<int32_t> system = ids(37, 99);
  std::vector<CompletionParams> out;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> own = ids(3 + i % 7, 200 + static_cast<unsigned>(i));
    p.insert(p.end(), own.begin(), own.end());
    out.push_back(request(p, i == 5 ? 2 : 1, i % 2 ? 0.9 : 0.0, 40 + static_cast<uint64_t>(i), 5));
  }
  out.push_back(request(system, 1, 0.0, 50, 5));  // the system prompt alone
  return out;
}

TEST(EnginePrefixCaching, SameBitsWithCachingOnAndOff) {
  const Olmo2Model model = Olmo2Model::load(checkpoint().path, ShardSpec::whole(checkpoint().config));
  const std::vector<CompletionParams> batch = shared_prefix_requests();
  std::vector<std::vector<Answer>> runs;  // caching on, off
  std::vector<std::string> scrapes;
  for (bool caching : {true, false}) {
    monitoring::ServeMetrics metrics;
    ServingEngine engine(model, &tokenizer(), &metrics, options(caching), EngineRanks{});
    EngineThread running(engine);
    std::vector<Answer> answers;
    for (const CompletionParams& p : batch) answers.push_back(test::run_batch(engine, {p})[0]);  // one by one
    for (const Answer& a : test::run_batch(engine, batch)) answers.push_back(a);                 // all at once
    running.stop();
    runs.push_back(std::move(answers));
    scrapes.push_back(metrics.scrape());
  }
  ASSERT_EQ(runs[0].size(), 2 * batch.size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    ASSERT_TRUE(runs[0][i].error.empty() && runs[1][i].error.empty());
    ASSERT_EQ(runs[0][i].choices.size(), runs[1][i].choices.size());
    for (size_t c = 0; c < runs[0][i].choices.size(); ++c) {
      test::expect_same_bits(runs[0][i].choices[c], runs[1][i].choices[c], "answer " + std::to_string(i));
    }
  }
  // One by one, each request after the first finds the system prompt's 9 full blocks
  // (36 tokens) cached; so do all in the second round.
  const double queries = test::scraped(scrapes[0], "olmo2_serve_prefix_cache_queries_total");
  const double hits = test::scraped(scrapes[0], "olmo2_serve_prefix_cache_hits_total");
  double prompt_tokens = 0;
  for (const CompletionParams& p : batch) prompt_tokens += static_cast<double>(p.prompt.size());
  EXPECT_EQ(queries, 2 * prompt_tokens);
  EXPECT_GE(hits, 36.0 * (2 * static_cast<double>(batch.size()) - 1)) << scrapes[0];
  EXPECT_LT(hits, queries);
  EXPECT_EQ(test::scraped(scrapes[1], "olmo2_serve_prefix_cache_queries_total"), 0);
  EXPECT_EQ(test::scraped(scrapes[1], "olmo2_serve_prefix_cache_hits_total"), 0);
  EXPECT_EQ(test::scraped(scrapes[0], "olmo2_serve_kv_cache_usage_ratio"), 0) << "cached blocks count as free";
}

TEST(EnginePrefixCaching, PromptLogprobsScoreEveryPositionOfACachedPrompt) {
  // A request for the prompt fills the cache; scoring the same prompt (echo with
  // logprobs) then computes every position anyway — its prompt log-probabilities are
  // those of a fresh engine without caching, and so are its tokens.
  const Olmo2Model model = Olmo2Model::load(checkpoint().path, ShardSpec::whole(checkpoint().config));
  const std::vector<int32_t> prompt = ids(41, 77);
  CompletionParams scoring = request(prompt, 2, 0.0, 5, 3);
  scoring.prompt_logprobs = true;
  std::vector<std::vector<SelectedToken>> prompt_tokens;
  std::vector<Answer> answers;
  for (bool caching : {true, false}) {
    ServingEngine engine(model, &tokenizer(), nullptr, options(caching), EngineRanks{});
    EngineThread running(engine);
    test::run_batch(engine, {request(prompt, 1, 0.0, 5, 2)});
    std::shared_ptr<ServeRequest> r = engine.submit(scoring);
    std::vector<SelectedToken> got;
    Answer a;
    a.choices.resize(2);
    for (int done = 0; done < 2;) {
      std::optional<CompletionChunk> c = r->next(std::chrono::seconds(60));
      ASSERT_TRUE(c.has_value() && c->error.empty());
      if (!c->prompt_tokens.empty()) {
        EXPECT_EQ(c->choice, 0) << "prompt logprobs come with choice 0";
        got = c->prompt_tokens;
      }
      test::ChoiceOut& o = a.choices.at(static_cast<size_t>(c->choice));
      o.tokens.insert(o.tokens.end(), c->tokens.begin(), c->tokens.end());
      o.text += c->text;
      if (!c->finish_reason.empty()) o.finish_reason = c->finish_reason, ++done;
    }
    prompt_tokens.push_back(got);
    answers.push_back(a);
  }
  ASSERT_EQ(prompt_tokens[0].size(), prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) {
    EXPECT_EQ(prompt_tokens[0][i].id, prompt[i]);
    EXPECT_EQ(std::memcmp(&prompt_tokens[0][i].logprob, &prompt_tokens[1][i].logprob, sizeof(float)), 0) << i;
  }
  EXPECT_NE(prompt_tokens[0][5].logprob, 0.0f);
  for (size_t c = 0; c < 2; ++c) test::expect_same_bits(answers[0].choices[c], answers[1].choices[c], "scoring");
}

TEST(EngineChoices, ScoringOnlyEndsEveryChoiceWithThePromptOnChoiceZero) {
  // max_tokens 0 (echo): nothing is generated; each choice ends with "length", and the
  // prompt's log-probabilities come once, with choice 0.
  const Olmo2Model model = Olmo2Model::load(checkpoint().path, ShardSpec::whole(checkpoint().config));
  CompletionParams p = request(ids(14, 21), 3, 0.0, 9, 0);
  p.prompt_logprobs = true;
  ServingEngine engine(model, &tokenizer(), nullptr, options(true), EngineRanks{});
  EngineThread running(engine);
  std::shared_ptr<ServeRequest> r = engine.submit(p);
  std::vector<std::string> reasons(3);
  size_t prompt_entries = 0, done = 0;
  while (done < 3) {
    const std::optional<CompletionChunk> c = r->next(std::chrono::seconds(60));
    ASSERT_TRUE(c.has_value() && c->error.empty());
    EXPECT_TRUE(c->tokens.empty());
    if (!c->prompt_tokens.empty()) {
      EXPECT_EQ(c->choice, 0);
      prompt_entries += c->prompt_tokens.size();
    }
    if (!c->finish_reason.empty()) reasons.at(static_cast<size_t>(c->choice)) = c->finish_reason, ++done;
  }
  EXPECT_EQ(reasons, (std::vector<std::string>{"length", "length", "length"}));
  EXPECT_EQ(prompt_entries, 14u);
}

TEST(EnginePrefixCaching, ACancelledRequestEndsEveryChoice) {
  const Olmo2Model model = Olmo2Model::load(checkpoint().path, ShardSpec::whole(checkpoint().config));
  monitoring::ServeMetrics metrics;
  ServingEngine engine(model, &tokenizer(), &metrics, options(true), EngineRanks{});
  EngineThread running(engine);
  CompletionParams long_one = request(ids(10, 7), 3, 0.7, 70, 200);
  std::shared_ptr<ServeRequest> r = engine.submit(long_one);
  std::optional<CompletionChunk> first;
  for (int i = 0; i < 600 && !first; ++i) first = r->next(std::chrono::milliseconds(100));
  ASSERT_TRUE(first.has_value());
  r->cancel();
  const Answer a = test::collect(*r);
  EXPECT_EQ(a.error, "cancelled");
  // The server goes on: a request after it is answered as on a fresh engine, and no
  // block stays held.
  const CompletionParams after = request(ids(10, 7), 2, 0.7, 70, 6);
  const Answer again = test::run_batch(engine, {after})[0];
  running.stop();
  const Answer fresh = serve(model, {after}, true)[0];
  ASSERT_EQ(again.choices.size(), 2u);
  for (size_t c = 0; c < 2; ++c) test::expect_same_bits(again.choices[c], fresh.choices[c], "after the cancel");
  const std::string m = metrics.scrape();
  EXPECT_EQ(test::scraped(m, "olmo2_serve_kv_cache_usage_ratio"), 0);
  EXPECT_EQ(test::scraped(m, "olmo2_serve_running_requests"), 0);
}

}  // namespace
}  // namespace olmo2
