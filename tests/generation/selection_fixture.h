// The token-selection fixture (tests/generation/make_selection_fixtures.py): random
// logits rows, each with a request (logit_bias, penalties, banned ids, sampling, target)
// and PyTorch's reference — vLLM's adjusted logits, the chosen id, the raw
// log-probabilities. Shared by the one-process and the TP tests.
#pragma once

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/generation/token_selection.h"
#include "runtime/io/safetensors.h"
#include "tests/test_util.h"

namespace olmo2::test {

struct SelectionCase {
  std::string name;
  SelectionRequest request;
  std::vector<float> logits;    ///< raw, [vocab]
  std::vector<float> adjusted;  ///< torch's adjusted logits (the raw ones without adjustments)
  int32_t expected_id = -1;
  double expected_logprob = 0;
  std::vector<std::pair<int32_t, double>> expected_top;  ///< (id, raw log-probability)
  int32_t raw_argmax = -1;
};

struct SelectionFixture {
  int64_t vocab = 0;
  std::vector<SelectionCase> cases;
};

inline SelectionFixture load_selection_fixture() {
  const std::string dir = source_path("tests/generation/fixtures/");
  std::ifstream in(dir + "selection.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const SafetensorsFile st(dir + "selection.safetensors");
  SelectionFixture f;
  f.vocab = j.at("vocab").get<int64_t>();
  const size_t v = static_cast<size_t>(f.vocab);
  auto row = [&](const char* key, size_t i) {
    std::vector<float> x(v);
    std::memcpy(x.data(), st.data(st.tensors().at(key)) + i * v * sizeof(float), v * sizeof(float));
    return x;
  };
  size_t i = 0;
  for (const nlohmann::json& r : j.at("rows")) {
    SelectionCase c;
    c.name = r.at("name").get<std::string>() + " draw " + std::to_string(r.at("draw").get<int>());
    SelectionRequest& q = c.request;
    q.params = {.temperature = r.at("temperature"), .top_k = r.at("top_k"), .top_p = r.at("top_p"),
                .min_p = r.at("min_p"), .seed = r.at("seed")};
    q.draw = r.at("draw").get<uint64_t>();
    q.logprobs = r.at("logprobs").get<int32_t>();
    for (const auto& b : r.at("logit_bias")) q.adjust.logit_bias.emplace_back(b[0].get<int32_t>(), b[1].get<float>());
    q.adjust.presence_penalty = r.at("presence");
    q.adjust.frequency_penalty = r.at("frequency");
    q.adjust.repetition_penalty = r.at("repetition");
    q.banned = r.at("banned").get<std::vector<int32_t>>();
    if (q.adjust.repetition_penalty != 1) q.prompt_ids = r.at("prompt_ids").get<std::vector<int32_t>>();
    if (q.adjust.penalties()) {
      for (const auto& o : r.at("output_counts")) q.output_counts.emplace_back(o[0].get<int32_t>(), o[1].get<int32_t>());
    }
    q.target = r.at("target").get<int32_t>();
    c.logits = row("logits", i);
    c.adjusted = row("adjusted", i);
    c.expected_id = r.at("expected_id");
    c.expected_logprob = r.at("expected_logprob");
    for (const auto& t : r.at("expected_top")) c.expected_top.emplace_back(t[0].get<int32_t>(), t[1].get<double>());
    c.raw_argmax = r.at("raw_argmax");
    f.cases.push_back(std::move(c));
    ++i;
  }
  return f;
}

}  // namespace olmo2::test
