// The serving engine in a test process (docs/architecture.md §8): a small random OLMo 2
// checkpoint with the dolma2 tokenizer, requests run through a ServingEngine to their
// end, and each answer's choices collected chunk by chunk, to be compared bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
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

/// The value of an unlabelled series in a Prometheus text scrape (−1 when absent).
inline double scraped(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = ("\n" + text).find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size() - 1));
}

}  // namespace olmo2::test
