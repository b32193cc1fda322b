// The serving engine in one process with the request fields of token selection
// (docs/architecture.md §8): prompt logprobs from the prefill's own logits — chunked or
// not, against transformers, without changing other sequences by a bit — max_tokens 0,
// logit_bias, min_tokens, stop_token_ids, include_stop_str_in_output and
// skip_special_tokens. The tp 2 / pp 2 layouts are in test_engine_selection_mpi.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "ops/device_emulation.h"
#include "ops/device_runtime.h"
#include "runtime/generation/logits_adjustments.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/serve/engine_fixture.h"

namespace olmo2 {
namespace {

using test::Outcome;

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(test::source_path("data/dolma2-tokenizer.json"));
  return t;
}

const Olmo2Model& tiny() {
  static const Olmo2Model m = Olmo2Model::load(test::prompt_logprobs_model());
  return m;
}

/// 64 blocks of 4 positions, up to 4 sequences, `budget` tokens a step (16: the
/// fixture's 40-token prompt is prefilled in three chunks).
SchedulerOptions options(int64_t budget = 16) {
  return SchedulerOptions{.num_blocks = 64, .block_size = 4, .max_running = 4, .max_batch_tokens = budget};
}

std::vector<Outcome> serve(const std::vector<CompletionParams>& requests, int64_t budget = 16) {
  return test::serve_all(tiny(), &tokenizer(), EngineRanks{}, options(budget), requests);
}

std::string text_of(std::vector<int32_t> ids) { return tokenizer().decode(ids, true); }

TEST(EngineSelection, PromptLogprobsOfAChunkedPrefillMatchTransformers) {
  const test::PromptReference ref = test::load_prompt_reference();
  // max_tokens 0 (echo scoring): prefill only, nothing sampled, "length".
  const std::vector<Outcome> chunked = serve({test::scoring_request(ref.prompt, 0, 3)});
  ASSERT_EQ(chunked.size(), 1u);
  const Outcome& o = chunked[0];
  EXPECT_EQ(o.finish_reason, "length");
  EXPECT_TRUE(o.error.empty()) << o.error;
  EXPECT_TRUE(o.tokens.empty());
  EXPECT_EQ(o.text, "");
  EXPECT_EQ(o.chunks_with_prompt, 1);
  test::expect_prompt_logprobs(o.prompt_tokens, ref, 3, 3e-5, "chunks of 16");
  // The prompt in one step: the same bits.
  const std::vector<Outcome> whole = serve({test::scoring_request(ref.prompt, 0, 3)}, 64);
  EXPECT_EQ(test::bits(whole[0].prompt_tokens), test::bits(o.prompt_tokens));
  // No alternatives: the prompt tokens' own log-probabilities, still the same bits.
  const std::vector<Outcome> bare = serve({test::scoring_request(ref.prompt, 0, 0)});
  ASSERT_EQ(bare[0].prompt_tokens.size(), ref.prompt.size());
  for (size_t i = 0; i < ref.prompt.size(); ++i) {
    EXPECT_TRUE(bare[0].prompt_tokens[i].top.empty());
    EXPECT_EQ(bare[0].prompt_tokens[i].logprob, o.prompt_tokens[i].logprob) << i;
  }
}

TEST(EngineSelection, PromptLogprobsChangeNoOtherSequenceAndComeWithTheFirstChunk) {
  const test::PromptReference ref = test::load_prompt_reference();
  const std::vector<int32_t> other(ref.prompt.rbegin(), ref.prompt.rbegin() + 23);
  const CompletionParams plain = test::greedy_request(other, 6, 2);
  const std::vector<Outcome> alone = serve({plain});
  const std::vector<Outcome> both = serve({plain, test::scoring_request(ref.prompt, 4, 2)});
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(test::bits(both[0].tokens), test::bits(alone[0].tokens)) << "the other sequence, bit for bit";
  EXPECT_EQ(both[0].text, alone[0].text);
  EXPECT_TRUE(both[0].prompt_tokens.empty());
  const Outcome& s = both[1];
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_TRUE(s.prompt_in_first_chunk);
  EXPECT_EQ(s.chunks_with_prompt, 1);
  test::expect_prompt_logprobs(s.prompt_tokens, ref, 2, 3e-5, "generating too");
  ASSERT_EQ(s.tokens.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(s.tokens[i].id, ref.greedy[i]) << "greedy token " << i;
}

TEST(EngineSelection, LogitBiasOfMinus100OnTheGreedyTokenChangesTheOutput) {
  const test::PromptReference ref = test::load_prompt_reference();
  const auto& last = ref.top.back();  // the first generated token's distribution
  CompletionParams p = test::greedy_request(ref.prompt, 1, 2);
  CompletionParams biased = p;
  biased.adjust.logit_bias = {{ref.greedy[0], -100.0f}};
  const std::vector<Outcome> got = serve({p, biased});
  ASSERT_EQ(got[0].tokens.size(), 1u);
  ASSERT_EQ(got[1].tokens.size(), 1u);
  EXPECT_EQ(got[0].tokens[0].id, ref.greedy[0]);
  EXPECT_EQ(got[1].tokens[0].id, last[1].first) << "the runner-up";
  // Reported from the raw distribution (vLLM's default): the runner-up's own
  // log-probability, and the unbiased greedy token first among the alternatives.
  EXPECT_NEAR(got[1].tokens[0].logprob, last[1].second, 3e-5);
  ASSERT_EQ(got[1].tokens[0].top.size(), 2u);
  EXPECT_EQ(got[1].tokens[0].top[0].id, ref.greedy[0]);
  EXPECT_NEAR(got[1].tokens[0].top[0].logit, last[0].second, 3e-5);
  EXPECT_EQ(test::bits({{-1, 0.0f, got[1].tokens[0].top}}), test::bits({{-1, 0.0f, got[0].tokens[0].top}}))
      << "the same alternatives, bit for bit, as without the bias";
}

TEST(EngineSelection, StopTokenIdsMinTokensAndTheirText) {
  const test::PromptReference ref = test::load_prompt_reference();
  const std::vector<int32_t>& g = ref.greedy;
  const int32_t eos = static_cast<int32_t>(tiny().config().eos_token_ids.at(0));
  std::vector<CompletionParams> reqs;
  reqs.push_back(test::greedy_request(ref.prompt, 6));                 // 0: plain
  reqs.push_back(test::greedy_request(ref.prompt, 6));                 // 1: stops at g[2]
  reqs[1].stop_token_ids = {g[2], 150};
  reqs.push_back(reqs[1]);                                             // 2: … with its text
  reqs[2].include_stop_str_in_output = true;
  reqs.push_back(test::greedy_request(ref.prompt, 6));                 // 3: g[0] banned at first
  reqs[3].stop_token_ids = {g[0]};
  reqs[3].min_tokens = 1;
  reqs.push_back(test::greedy_request(ref.prompt, 6));                 // 4: EOS at once
  reqs[4].adjust.logit_bias = {{eos, 100.0f}};
  reqs.push_back(reqs[4]);                                             // 5: … not before 2 tokens
  reqs[5].min_tokens = 2;
  reqs.push_back(reqs[4]);                                             // 6: … ignored
  reqs[6].ignore_eos = true;
  reqs[6].max_tokens = 3;
  const std::vector<Outcome> o = serve(reqs);
  auto ids = [](const Outcome& x) {
    std::vector<int32_t> v;
    for (const SelectedToken& t : x.tokens) v.push_back(t.id);
    return v;
  };
  EXPECT_EQ(ids(o[0]), g);
  EXPECT_EQ(o[0].finish_reason, "length");
  EXPECT_EQ(o[0].text, text_of(g));
  EXPECT_EQ(ids(o[1]), std::vector<int32_t>(g.begin(), g.begin() + 3));
  EXPECT_EQ(o[1].finish_reason, "stop");
  EXPECT_EQ(o[1].text, text_of({g[0], g[1]})) << "the stop token's text is dropped";
  EXPECT_EQ(o[2].text, text_of({g[0], g[1], g[2]})) << "include_stop_str_in_output keeps it";
  EXPECT_EQ(o[2].finish_reason, "stop");
  ASSERT_FALSE(o[3].tokens.empty());
  EXPECT_EQ(o[3].tokens[0].id, ref.top.back()[1].first) << "min_tokens bans the stop token: the runner-up";
  EXPECT_EQ(ids(o[4]), std::vector<int32_t>{eos});
  EXPECT_EQ(o[4].finish_reason, "stop");
  EXPECT_EQ(o[4].text, "");
  EXPECT_EQ(ids(o[5]), (std::vector<int32_t>{g[0], g[1], eos})) << "EOS banned for the first two tokens";
  EXPECT_EQ(o[5].finish_reason, "stop");
  EXPECT_EQ(ids(o[6]), (std::vector<int32_t>{eos, eos, eos}));
  EXPECT_EQ(o[6].finish_reason, "length");
}

/// Greedy decoding with `adjust` written out step by step: the whole sequence through the
/// model (no cache), the last logits adjusted by apply_logits_adjustments (checked against
/// PyTorch in tests/generation/) with the prompt's ids and the output's counts so far.
std::vector<int32_t> penalised_greedy(const std::vector<int32_t>& prompt, const LogitsAdjustments& adjust, int n) {
  std::vector<int32_t> seq = prompt, out;
  std::vector<int32_t> prompt_ids = prompt;
  std::sort(prompt_ids.begin(), prompt_ids.end());
  prompt_ids.erase(std::unique(prompt_ids.begin(), prompt_ids.end()), prompt_ids.end());
  for (int i = 0; i < n; ++i) {
    const ForwardResult result = tiny().forward({seq});
    const Tensor& logits = result.logits[0];
    const int64_t v = logits.view().size(1), last = logits.view().size(0) - 1;
    std::vector<float> x(logits.f32() + last * v, logits.f32() + (last + 1) * v);
    std::map<int32_t, int32_t> counts;
    for (int32_t t : out) ++counts[t];
    const std::vector<std::pair<int32_t, int32_t>> c(counts.begin(), counts.end());
    apply_logits_adjustments(x, 0, adjust, {}, prompt_ids, c);
    out.push_back(static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin()));
    seq.push_back(out.back());
  }
  return out;
}

TEST(EngineSelection, PenaltiesSeeThePromptAndTheOutputSoFar) {
  const test::PromptReference ref = test::load_prompt_reference();
  std::vector<CompletionParams> reqs(3, test::greedy_request(ref.prompt, 6));
  reqs[0].adjust.repetition_penalty = 1.6;
  reqs[1].adjust.frequency_penalty = -1.5, reqs[1].adjust.presence_penalty = -1.0;  // repeat!
  reqs[2].adjust.repetition_penalty = 0.8, reqs[2].adjust.frequency_penalty = -0.4;
  reqs[2].adjust.logit_bias = {{ref.greedy[1], 0.5f}, {ref.greedy[3], -0.5f}};
  const std::vector<Outcome> o = serve(reqs);
  for (size_t r = 0; r < reqs.size(); ++r) {
    std::vector<int32_t> ids;
    for (const SelectedToken& t : o[r].tokens) ids.push_back(t.id);
    EXPECT_EQ(ids, penalised_greedy(ref.prompt, reqs[r].adjust, 6)) << "request " << r;
    if (r < 2) EXPECT_NE(ids, ref.greedy) << "request " << r << ": the penalty changes the greedy text";
  }
}

TEST(EngineSelection, SkipSpecialTokensPerRequest) {
  // A model over the dolma2 vocabulary, whose EOS <|endoftext|> (100257) is special.
  ModelConfig c;
  c.vocab_size = 100352, c.hidden_size = 32, c.intermediate_size = 64, c.num_hidden_layers = 1;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 16, c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-6, c.rope_theta = 10000, c.eos_token_ids = {100257};
  const Olmo2Model m = Olmo2Model::random(c, 3, 0.2f);
  CompletionParams p = test::greedy_request(tokenizer().encode("Hello there"), 2);
  p.adjust.logit_bias = {{100257, 100.0f}};
  p.ignore_eos = true;
  CompletionParams keep = p;
  keep.skip_special_tokens = false;
  const std::vector<Outcome> o = test::serve_all(m, &tokenizer(), EngineRanks{}, options(), {p, keep});
  ASSERT_EQ(o[0].tokens.size(), 2u);
  EXPECT_EQ(o[0].tokens[0].id, 100257);
  EXPECT_EQ(o[0].text, "");
  EXPECT_EQ(o[1].text, "<|endoftext|><|endoftext|>");
}

TEST(EngineSelection, OnTheDeviceTheSameAnswers) {
  // Logits on the device: sampled rows' candidates and prompt positions' targets made
  // there, adjusted rows copied to the host. Emulated (OLMO2_DEVICE_EMULATION=1, the CPU
  // kernels) the answers are the host's bits; on a GPU its kernels' logits agree with
  // transformers within the golden bound.
  std::string why;
  if (ops::gpu_count(&why) == 0) GTEST_SKIP() << "no GPU (nor OLMO2_DEVICE_EMULATION=1): " << why;
  const test::PromptReference ref = test::load_prompt_reference();
  std::vector<CompletionParams> reqs = {test::scoring_request(ref.prompt, 3, 3), test::greedy_request(ref.prompt, 3, 2)};
  reqs[1].adjust.logit_bias = {{ref.greedy[0], -100.0f}};
  reqs[1].adjust.repetition_penalty = 1.3;
  const Olmo2Model on_device = Olmo2Model::load(test::prompt_logprobs_model(), tiny().shard(), std::nullopt, Device::CUDA);
  const std::vector<Outcome> dev = test::serve_all(on_device, &tokenizer(), EngineRanks{}, options(), reqs);
  const std::vector<Outcome> host = serve(reqs);
  if (ops::device_emulated()) {
    for (size_t r = 0; r < reqs.size(); ++r) {
      EXPECT_EQ(test::bits(dev[r].prompt_tokens), test::bits(host[r].prompt_tokens)) << r;
      EXPECT_EQ(test::bits(dev[r].tokens), test::bits(host[r].tokens)) << r;
    }
  } else {
    test::expect_prompt_logprobs(dev[0].prompt_tokens, ref, 3, 1e-4, "on the GPU");
    for (size_t r = 0; r < reqs.size(); ++r) {
      ASSERT_EQ(dev[r].tokens.size(), host[r].tokens.size());
      for (size_t i = 0; i < host[r].tokens.size(); ++i) EXPECT_EQ(dev[r].tokens[i].id, host[r].tokens[i].id);
    }
  }
}

}  // namespace
}  // namespace olmo2
