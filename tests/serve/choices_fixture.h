// The serving engine in a test process (docs/architecture.md §8): a small random OLMo 2
// checkpoint with the dolma2 tokenizer, requests run through a ServingEngine to their
// end, each answer's choices collected chunk by chunk and compared bit for bit, and
// the requests with n > 1 choices the engine tests share.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "monitoring/serve_metrics.h"
#include "runtime/model/parameters.h"
#include "runtime/serve/serving_engine.h"
#include "runtime/train/checkpoint.h"
#include "tests/test_util.h"

namespace olmo2::test {

/// 2 layers, hidden 64, 4 query / 2 KV heads, vocab 512 (ids with text in the dolma2
/// tokenizer), context 256; weights N(0, 0.2²) (wide logits: greedy far from ties).
/// Saved as a checkpoint: Olmo2Model::load gives any shard on any device.
struct EngineModel {
  TempDir dir;
  std::string path;
  ModelConfig config;
  EngineModel() {
    ModelConfig& c = config;
    c.vocab_size = 512, c.hidden_size = 64, c.intermediate_size = 128, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16, c.max_position_embeddings = 256;
    c.rms_norm_eps = 1e-6, c.rope_theta = 10000, c.eos_token_ids = {511};
    Olmo2Model m = Olmo2Model::random(c, 23, 0.2f);
    CheckpointContents contents;
    contents.config = c;
    contents.model_tensors = hf_named_tensors(m.mutable_weights(), c);
    contents.tokenizer_file = source_path("data/dolma2-tokenizer.json");
    path = save_checkpoint(dir.path(), 0, contents, 0);
  }
};

/// One choice of an answer, as the chunks delivered it.
struct ChoiceOut {
  std::vector<SelectedToken> tokens;
  std::string text, finish_reason;
  double cumulative_logprob = 0;  ///< the last chunk's
};

/// A whole answer: its choices, or the error that ended it.
struct Answer {
  std::vector<ChoiceOut> choices;
  std::string error;
};

/// Drains `r` until every choice has finished or an error chunk came (60 s at most).
inline Answer collect(ServeRequest& r) {
  Answer a;
  a.choices.resize(static_cast<size_t>(std::max(r.params().choices, 1)));
  size_t finished = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (finished < a.choices.size() && a.error.empty() && std::chrono::steady_clock::now() < end) {
    const std::optional<CompletionChunk> c = r.next(std::chrono::milliseconds(100));
    if (!c) continue;
    if (!c->error.empty()) {
      a.error = c->error;
      break;
    }
    EXPECT_TRUE(c->choice >= 0 && c->choice < static_cast<int32_t>(a.choices.size())) << c->choice;
    ChoiceOut& o = a.choices.at(static_cast<size_t>(c->choice));
    EXPECT_TRUE(o.finish_reason.empty()) << "a chunk after choice " << c->choice << " finished";
    o.tokens.insert(o.tokens.end(), c->tokens.begin(), c->tokens.end());
    o.text += c->text;
    o.cumulative_logprob = c->cumulative_logprob;
    if (!c->finish_reason.empty()) o.finish_reason = c->finish_reason, ++finished;
  }
  if (finished < a.choices.size() && a.error.empty()) ADD_FAILURE() << "request " << r.id() << " did not finish";
  return a;
}

/// Rank 0's side of a running engine: run() on a thread of its own until stop().
class EngineThread {
 public:
  explicit EngineThread(ServingEngine& e) : engine_(e), thread_([this] { engine_.run(); }) {}
  ~EngineThread() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    engine_.request_stop();
    thread_.join();
  }

 private:
  ServingEngine& engine_;
  std::thread thread_;
};

/// Submits every request of `batch` at once and collects the answers, in order.
inline std::vector<Answer> run_batch(ServingEngine& e, const std::vector<CompletionParams>& batch) {
  std::vector<std::shared_ptr<ServeRequest>> rs;
  for (const CompletionParams& p : batch) rs.push_back(e.submit(p));
  std::vector<Answer> out;
  for (auto& r : rs) out.push_back(collect(*r));
  return out;
}

/// The same bits: ids, log-probabilities and alternatives of every token, the text and
/// the finish reason of every choice.
inline void expect_same_bits(const ChoiceOut& got, const ChoiceOut& want, const std::string& what) {
  ASSERT_EQ(got.tokens.size(), want.tokens.size()) << what;
  for (size_t t = 0; t < got.tokens.size(); ++t) {
    const SelectedToken &a = got.tokens[t], &b = want.tokens[t];
    EXPECT_EQ(a.id, b.id) << what << " token " << t;
    EXPECT_EQ(std::memcmp(&a.logprob, &b.logprob, sizeof(float)), 0) << what << " token " << t;
    ASSERT_EQ(a.top.size(), b.top.size()) << what << " token " << t;
    for (size_t j = 0; j < a.top.size(); ++j) {
      EXPECT_EQ(a.top[j].id, b.top[j].id) << what << " token " << t;
      EXPECT_EQ(std::memcmp(&a.top[j].logit, &b.top[j].logit, sizeof(float)), 0) << what << " token " << t;
    }
  }
  EXPECT_EQ(got.text, want.text) << what;
  EXPECT_EQ(got.finish_reason, want.finish_reason) << what;
}

/// `n` token ids in [1, 500], a function of `seed`.
inline std::vector<int32_t> ids(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = 1 + static_cast<int32_t>(rng() % 500);
  return t;
}

/// `prompt`, `choices` completions of `max_tokens`, greedy (temperature 0) or sampled,
/// with the chosen tokens' log-probabilities and 2 alternatives.
inline CompletionParams request(std::vector<int32_t> prompt, int32_t choices, double temperature, uint64_t seed,
                                int64_t max_tokens = 6, int64_t top_k = 0, double top_p = 1.0) {
  CompletionParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.sampling.temperature = temperature;
  p.sampling.top_k = top_k;
  p.sampling.top_p = top_p;
  p.sampling.seed = seed;
  p.want_logprobs = true;
  p.logprobs = 2;
  p.ignore_eos = true;
  p.choices = choices;
  return p;
}

/// Prompts of 1, 5 (its last token starts a block), 7 and 30 tokens (partial last blocks)
/// and 45 (a chunked prefill); greedy and sampled (top-k, top-p, neither); max_tokens 1.
inline std::vector<CompletionParams> choice_requests() {
  return {request(ids(1, 1), 3, 0.0, 11),           request(ids(5, 2), 3, 0.9, 12, 6, 50),
          request(ids(7, 3), 4, 1.0, 13, 6, 0, 0.9), request(ids(30, 4), 2, 0.8, 14, 1),
          request(ids(45, 5), 2, 0.0, 15),           request(ids(9, 6), 3, 1.2, 16, 8)};
}

/// Each choice as a request of its own: choices 1, seed choice_seed(seed, c).
inline std::vector<CompletionParams> separately(const std::vector<CompletionParams>& batch) {
  std::vector<CompletionParams> out;
  for (const CompletionParams& p : batch) {
    for (int32_t c = 0; c < p.choices; ++c) {
      CompletionParams q = p;
      q.choices = 1;
      q.sampling.seed = choice_seed(p.sampling.seed, c);
      out.push_back(q);
    }
  }
  return out;
}

/// Checks the choices of `got` against the separate answers `alone` (in separately()'s
/// order), and the cumulative log-probability of every choice.
inline void expect_choices_as_alone(const std::vector<CompletionParams>& batch, const std::vector<Answer>& got,
                                    const std::vector<Answer>& alone, const std::string& what) {
  ASSERT_EQ(got.size(), batch.size());
  size_t k = 0;
  int differing = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    ASSERT_TRUE(got[i].error.empty()) << what << ": " << got[i].error;
    ASSERT_EQ(got[i].choices.size(), static_cast<size_t>(batch[i].choices)) << what;
    for (size_t c = 0; c < got[i].choices.size(); ++c, ++k) {
      const ChoiceOut& ch = got[i].choices[c];
      ASSERT_EQ(alone.at(k).choices.size(), 1u);
      expect_same_bits(ch, alone[k].choices[0], what + " request " + std::to_string(i) + " choice " + std::to_string(c));
      EXPECT_EQ(ch.tokens.size(), static_cast<size_t>(batch[i].max_tokens));
      double sum = 0;
      for (const SelectedToken& t : ch.tokens) sum += t.logprob;
      EXPECT_EQ(ch.cumulative_logprob, sum) << what;
      if (c > 0 && ch.tokens.size() > 1) {
        differing += ch.text != got[i].choices[0].text ? 1 : 0;
        if (batch[i].sampling.temperature == 0) {
          EXPECT_EQ(ch.text, got[i].choices[0].text) << "greedy choices";
        }
      }
    }
  }
  EXPECT_GE(differing, 6) << what << ": sampled choices should differ (their seeds do)";
}

/// The value of an unlabelled series in a Prometheus text scrape (−1 when absent).
inline double scraped(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = ("\n" + text).find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size() - 1));
}

}  // namespace olmo2::test
