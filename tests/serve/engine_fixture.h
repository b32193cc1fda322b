// Running completion requests through a ServingEngine in the test process (one process,
// or every rank of an mpirun job), and the prompt log-probabilities of a tiny model made
// by transformers (tests/golden/make_prompt_logprobs_fixtures.py).
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/serve/serving_engine.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace olmo2::test {

/// What a request got back: its chunks joined.
struct Outcome {
  std::string text;
  std::vector<SelectedToken> tokens;
  std::vector<SelectedToken> prompt_tokens;  ///< from the first chunk that had them
  int chunks_with_prompt = 0;                ///< how many chunks carried prompt_tokens
  bool prompt_in_first_chunk = false;
  std::string finish_reason, error;
};

/// Runs `requests` through one engine, all submitted before its first step (so they
/// share steps the same way on every run), and returns each one's outcome on rank 0;
/// other ranks run the engine's loop and return nothing. A request without an answer for
/// 120 s fails the test. `kv_dtype`: the KV cache's pools (nullopt: the precision's).
inline std::vector<Outcome> serve_all(const Olmo2Model& model, const Tokenizer* tokenizer, const EngineRanks& ranks,
                                      const SchedulerOptions& scheduler, const std::vector<CompletionParams>& requests,
                                      std::optional<DType> kv_dtype = std::nullopt) {
  EngineOptions options;
  options.scheduler = scheduler;
  options.kv_dtype = kv_dtype;
  ServingEngine engine(model, tokenizer, nullptr, options, ranks);
  if (ranks.world && ranks.world->rank() != 0) {
    engine.run();
    return {};
  }
  std::vector<std::shared_ptr<ServeRequest>> handles;
  for (const CompletionParams& p : requests) handles.push_back(engine.submit(p));
  std::exception_ptr failure;
  std::thread loop([&] {
    try {
      engine.run();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  std::vector<Outcome> out;
  for (const auto& h : handles) {
    Outcome o;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (int chunk = 0;; ++chunk) {
      std::optional<CompletionChunk> c = h->next(std::chrono::milliseconds(50));
      if (!c) {
        if (std::chrono::steady_clock::now() < deadline && !failure) continue;
        ADD_FAILURE() << "request " << h->id() << " got no answer";
        break;
      }
      o.text += c->text;
      o.tokens.insert(o.tokens.end(), c->tokens.begin(), c->tokens.end());
      if (!c->prompt_tokens.empty()) {
        if (o.chunks_with_prompt++ == 0) o.prompt_tokens = c->prompt_tokens;
        o.prompt_in_first_chunk = o.prompt_in_first_chunk || chunk == 0;
      }
      if (!c->finish_reason.empty() || !c->error.empty()) {
        o.finish_reason = c->finish_reason;
        o.error = c->error;
        break;
      }
    }
    out.push_back(std::move(o));
  }
  engine.request_stop(true);
  loop.join();
  if (failure) std::rethrow_exception(failure);
  return out;
}

/// The fixture model of the prompt log-probabilities (6 layers: pp 2 and tp 2 both work).
inline std::string prompt_logprobs_model() { return source_path("tests/golden/fixtures/deep-gqa-f32"); }

/// transformers' answer for the fixture's prompt.
struct PromptReference {
  std::vector<int32_t> prompt;
  std::vector<double> target_logprobs;                           ///< position i: of prompt[i + 1]
  std::vector<std::vector<std::pair<int32_t, double>>> top;       ///< per position, most likely first
  std::vector<int32_t> greedy;                                   ///< the greedy continuation
};

inline PromptReference load_prompt_reference() {
  std::ifstream in(prompt_logprobs_model() + "/prompt_logprobs.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  PromptReference r;
  r.prompt = j.at("prompt").get<std::vector<int32_t>>();
  r.target_logprobs = j.at("target_logprobs").get<std::vector<double>>();
  for (const auto& pos : j.at("top")) {
    r.top.emplace_back();
    for (const auto& t : pos) r.top.back().emplace_back(t[0].get<int32_t>(), t[1].get<double>());
  }
  r.greedy = j.at("greedy").get<std::vector<int32_t>>();
  return r;
}

/// A greedy request for `prompt`.
inline CompletionParams greedy_request(std::vector<int32_t> prompt, int64_t max_tokens, int32_t logprobs = 0) {
  CompletionParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0;
  p.logprobs = logprobs;
  p.want_logprobs = logprobs > 0;
  return p;
}

/// Echo with logprobs: the prompt scored with `logprobs` alternatives per position.
inline CompletionParams scoring_request(std::vector<int32_t> prompt, int64_t max_tokens, int32_t logprobs) {
  CompletionParams p = greedy_request(std::move(prompt), max_tokens, logprobs);
  p.prompt_logprobs = true;
  return p;
}

/// Bits of every id and log-probability of `tokens`.
inline std::vector<std::pair<int32_t, uint32_t>> bits(const std::vector<SelectedToken>& tokens) {
  std::vector<std::pair<int32_t, uint32_t>> b;
  for (const SelectedToken& t : tokens) {
    b.emplace_back(t.id, std::bit_cast<uint32_t>(t.logprob));
    for (const Candidate& c : t.top) b.emplace_back(c.id, std::bit_cast<uint32_t>(c.logit));
  }
  return b;
}

/// Checks `got` (a request's prompt_tokens) against transformers within `tolerance`:
/// entry 0 the first prompt token without a log-probability, entry i the log-probability
/// of prompt token i and the `top` most likely ids at position i − 1.
inline void expect_prompt_logprobs(const std::vector<SelectedToken>& got, const PromptReference& ref, size_t top,
                                   double tolerance, const std::string& where) {
  SCOPED_TRACE(where);
  ASSERT_EQ(got.size(), ref.prompt.size());
  EXPECT_EQ(got[0].id, ref.prompt[0]);
  EXPECT_EQ(got[0].logprob, 0.0f);
  EXPECT_TRUE(got[0].top.empty());
  double worst = 0;
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, ref.prompt[i]) << "position " << i;
    worst = std::max(worst, ::olmo2::test::abs_diff(got[i].logprob, ref.target_logprobs[i - 1]));
    ASSERT_EQ(got[i].top.size(), top) << "position " << i;
    for (size_t k = 0; k < top; ++k) {
      EXPECT_EQ(got[i].top[k].id, ref.top[i - 1][k].first) << "position " << i << " alternative " << k;
      worst = std::max(worst, ::olmo2::test::abs_diff(got[i].top[k].logit, ref.top[i - 1][k].second));
    }
  }
  EXPECT_LE(worst, tolerance) << "largest |log-probability − transformers'|";
  std::cout << "[prompt logprobs] " << where << ": largest |log-probability − transformers'| " << worst << "\n";
}

}  // namespace olmo2::test
