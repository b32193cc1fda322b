// Speculative decoding in a test process (docs/architecture.md §8): requests of every
// mode, each served with and without drafted tokens, compared bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "monitoring/serve_metrics.h"
#include "runtime/serve/speculative/draft_model_proposer.h"
#include "runtime/serve/speculative/ngram_proposer.h"
#include "tests/serve/choices_fixture.h"

namespace olmo2::test {

/// `prompt` repeated `times` times: prompt lookup finds continuations in it.
inline std::vector<int32_t> repeated(const std::vector<int32_t>& prompt, int times) {
  std::vector<int32_t> out;
  for (int i = 0; i < times; ++i) out.insert(out.end(), prompt.begin(), prompt.end());
  return out;
}

/// Requests of every sampling mode on a model of vocabulary ≥ 512 with EOS 511: greedy
/// with logprobs, seeded top-k, top-p with min_p, penalties, logit_bias, min_tokens with
/// stop ids and EOS, several choices, prompt logprobs (echo), repetitive prompts (prompt
/// lookup's case), max_tokens 1.
inline std::vector<CompletionParams> speculative_requests() {
  std::vector<CompletionParams> b;
  b.push_back(request(ids(11, 21), 1, 0.0, 1, 24));                       // greedy, 2 alternatives
  b.push_back(request(repeated(ids(6, 22), 4), 1, 0.0, 2, 24));           // greedy, a repetitive prompt
  b.push_back(request(ids(9, 23), 1, 0.8, 3, 24, 40));                    // seeded top-k
  CompletionParams p = request(repeated(ids(5, 24), 3), 1, 1.0, 4, 20, 0, 0.9);
  p.sampling.min_p = 0.02;                                                 // top-p and min_p
  b.push_back(p);
  p = request(ids(13, 25), 1, 0.0, 5, 20);                                 // penalties
  p.adjust.frequency_penalty = 0.4, p.adjust.presence_penalty = 0.3, p.adjust.repetition_penalty = 1.3;
  b.push_back(p);
  p = request(ids(7, 26), 1, 0.7, 6, 20);                                  // penalties, sampled
  p.adjust.repetition_penalty = 0.8, p.adjust.frequency_penalty = -0.5;
  b.push_back(p);
  p = request(ids(8, 27), 1, 0.0, 7, 20);                                  // logit_bias
  p.adjust.logit_bias = {{17, 3.0f}, {301, 2.5f}, {499, -4.0f}};
  b.push_back(p);
  p = request(repeated(ids(4, 28), 5), 1, 0.0, 8, 30);                     // min_tokens with stop ids and EOS
  p.ignore_eos = false, p.min_tokens = 7;
  p.stop_token_ids = {p.prompt[1], p.prompt[2]};
  b.push_back(p);
  b.push_back(request(ids(10, 29), 3, 0.9, 9, 16));                        // three choices
  p = request(ids(12, 30), 1, 0.0, 10, 12);                                // echo with prompt logprobs
  p.prompt_logprobs = true;
  b.push_back(p);
  b.push_back(request(ids(3, 31), 1, 0.0, 11, 1));                         // max_tokens 1
  b.push_back(request(repeated(ids(9, 32), 3), 2, 0.0, 12, 28));           // two greedy choices, repetitive
  return b;
}

/// What a proposer setting is called and how to make a fresh one.
struct ProposerCase {
  std::string name;
  std::function<std::shared_ptr<Proposer>()> make;
  /// A draft with the target's weights: greedy proposals the target accepts every time
  /// (1), one with other weights (−1), prompt lookup (0).
  int agreement = 0;
};

/// Serves `batch` on `model`, all submitted at once (or each alone), with `proposer` (null:
/// plain decoding); `scrape` receives the metrics afterwards.
inline std::vector<Answer> serve_speculative(const Olmo2Model& model, const SchedulerOptions& scheduler,
                                             std::shared_ptr<Proposer> proposer,
                                             const std::vector<CompletionParams>& batch, bool alone = false,
                                             std::string* scrape = nullptr) {
  static const Tokenizer tok = Tokenizer::from_file(source_path("data/dolma2-tokenizer.json"));
  monitoring::ServeMetrics metrics;
  EngineOptions o;
  o.scheduler = scheduler;
  o.proposer = std::move(proposer);
  ServingEngine engine(model, &tok, &metrics, o, EngineRanks{});
  std::vector<Answer> out;
  {
    EngineThread running(engine);
    if (alone) {
      for (const CompletionParams& p : batch) out.push_back(run_batch(engine, {p}).at(0));
    } else {
      out = run_batch(engine, batch);
    }
  }
  if (scrape) *scrape = metrics.scrape();
  return out;
}

/// Every answer of `got` equals `want`'s bit for bit (tokens, log-probabilities and their
/// alternatives, text, finish reason) and none is an error.
inline void expect_same_answers(const std::vector<Answer>& got, const std::vector<Answer>& want,
                                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].error.empty() && want[i].error.empty()) << what << " request " << i << ": " << got[i].error
                                                               << want[i].error;
    ASSERT_EQ(got[i].choices.size(), want[i].choices.size()) << what;
    for (size_t c = 0; c < got[i].choices.size(); ++c) {
      expect_same_bits(got[i].choices[c], want[i].choices[c],
                       what + " request " + std::to_string(i) + " choice " + std::to_string(c));
      EXPECT_EQ(got[i].choices[c].cumulative_logprob, want[i].choices[c].cumulative_logprob) << what;
    }
  }
}

}  // namespace olmo2::test
