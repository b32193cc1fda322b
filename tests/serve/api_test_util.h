// Shared by the API tests: the dolma2 tokenizer, the reference token facts
// (fixtures/api_tokens.json, written by make_api_fixtures.py with `tokenizers` and
// jinja2), a served model, and a way to catch refusals.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/serve/api/api_error.h"
#include "runtime/serve/api/api_request.h"
#include "runtime/serve/api/chat_request.h"
#include "runtime/serve/api/chat_response.h"
#include "runtime/serve/api/completion_request.h"
#include "runtime/serve/api/completion_response.h"
#include "runtime/serve/api/logprobs_json.h"
#include "runtime/serve/api/response_id.h"
#include "runtime/serve/api/served_model.h"
#include "runtime/serve/api/token_text.h"
#include "runtime/serve/api/tokenize_api.h"
#include "runtime/serve/serve_request.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace olmo2::api_test {

inline const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(test::source_path("data/dolma2-tokenizer.json"));
  return t;
}

inline const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream in(test::source_path("tests/serve/fixtures/api_tokens.json"));
    return nlohmann::json::parse(in);
  }();
  return j;
}

/// The reference ids and offsets of one offset case by name.
inline const nlohmann::json& offset_case(const std::string& name) {
  for (const nlohmann::json& c : fixture()["offset_cases"]) {
    if (c["name"] == name) return c;
  }
  throw std::runtime_error("no offset case " + name);
}

/// The id of a single-byte token (fixture byte_tokens).
inline int32_t byte_token(int byte) {
  for (const nlohmann::json& t : fixture()["byte_tokens"]) {
    if (t["byte"] == byte) return t["id"];
  }
  throw std::runtime_error("no byte token " + std::to_string(byte));
}

inline const ServedModel kModel{.name = "m", .context_length = 64, .vocab_size = 100352, .cache_tokens = 1000};
constexpr uint64_t kFallbackSeed = 987654321;

struct Refusal {
  int status = 0;
  std::string param, message;
};

/// Runs `parse`, which must throw ApiError; its status, param and message.
template <typename F>
Refusal refusal(const std::string& what, F&& parse) {
  try {
    parse();
  } catch (const ApiError& e) {
    return {e.status(), e.param(), e.what()};
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not an ApiError: " << e.what();
    return {};
  }
  ADD_FAILURE() << what << ": accepted";
  return {};
}

/// A generated token with its log-probability and alternatives {id, logprob}.
inline SelectedToken token(int32_t id, float logprob = 0, std::vector<Candidate> top = {}) {
  SelectedToken t;
  t.id = id, t.logprob = logprob, t.top = std::move(top);
  return t;
}

/// A chunk of `choice` with `text` and `tokens`; `finish` ends the choice.
inline CompletionChunk chunk(int32_t choice, std::string text, std::vector<SelectedToken> tokens,
                             std::string finish = "", double cumulative = 0) {
  CompletionChunk c;
  c.choice = choice, c.text = std::move(text), c.tokens = std::move(tokens), c.finish_reason = std::move(finish);
  c.cumulative_logprob = cumulative;
  return c;
}

/// The JSON of a server-sent event "data: {…}\n\n".
inline nlohmann::json event_json(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n") << event;
  return nlohmann::json::parse(event.substr(6, event.size() - 8));
}

}  // namespace olmo2::api_test
