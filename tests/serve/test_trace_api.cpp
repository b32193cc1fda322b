// `activations` and `interventions` in the API (docs/architecture.md §13): parsed into
// each prompt's TraceSpec on /v1/completions and /v1/chat/completions, refused with the
// field named (an unknown name, n > 1 with reads, a worst case over
// --max-activation-bytes), and a choice's activations placed in the response body and
// in the stream's final event of that choice.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using namespace api_test;
using nlohmann::json;
using ::testing::HasSubstr;

constexpr int64_t kCreated = 1700000000;

/// kModel with a two-layer model of hidden size 4 behind it.
ServedModel traced_model() {
  ServedModel m = kModel;
  ModelConfig& c = m.config;
  c.vocab_size = kModel.vocab_size, c.hidden_size = 4, c.intermediate_size = 8, c.num_hidden_layers = 2;
  c.num_attention_heads = 2, c.num_key_value_heads = 2, c.head_dim = 2;
  c.max_position_embeddings = kModel.context_length;
  c.layer_types.assign(2, AttentionType::Full);
  return m;
}

ApiRequest completions(const std::string& body, const ServedModel& m = traced_model()) {
  return parse_completions(body, m, tokenizer(), kFallbackSeed);
}

std::string render(const nlohmann::ordered_json& messages, bool, const nlohmann::ordered_json&) {
  return "<|endoftext|>" + messages.dump();
}

ApiRequest chat(const std::string& body, const ServedModel& m = traced_model()) {
  return parse_chat(body, m, tokenizer(), render, kFallbackSeed);
}

/// Base64 of the little-endian f32 `values`.
std::string f32_base64(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return trace::base64_encode(bytes);
}

TEST(TraceApi, NoFieldsOrEmptyListsGiveNoSpec) {
  for (const std::string extra : {"", R"(, "activations": [], "interventions": [])",
                                  R"(, "activations": null, "interventions": null)"}) {
    const ApiRequest r = completions(R"({"prompt": [1, 2, 3], "n": 2)" + extra + "}");
    ASSERT_EQ(r.prompts.size(), 1u);
    EXPECT_EQ(r.prompts[0].trace, nullptr) << extra;
  }
}

TEST(TraceApi, EachPromptGetsTheSpecWithItsOwnLength) {
  const ApiRequest r = completions(R"({"prompt": [[1, 2, 3], [4, 5, 6, 7, 8]], "max_tokens": 4,
      "activations": ["layers.1.layer_output", {"name": "logits", "positions": "generated"}]})");
  ASSERT_EQ(r.prompts.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const std::shared_ptr<const trace::TraceSpec>& t = r.prompts[i].trace;
    ASSERT_NE(t, nullptr) << i;
    EXPECT_EQ(t->prompt_len, i == 0 ? 3 : 5);
    ASSERT_EQ(t->reads.size(), 2u);
    EXPECT_EQ(t->reads[0].site, TapSite::LayerOutput);
    EXPECT_EQ(t->reads[0].layers, (std::vector<int64_t>{1}));
    EXPECT_EQ(t->reads[1].site, TapSite::LmHeadOutput);
    EXPECT_TRUE(t->reads[1].layers.empty());
    EXPECT_EQ(t->reads[1].positions.kind, trace::PositionSelector::Kind::Generated);
    EXPECT_TRUE(t->interventions.empty());
  }
  EXPECT_NE(r.prompts[0].trace, r.prompts[1].trace) << "one spec per prompt";
}

TEST(TraceApi, InterventionsAloneAllowSeveralChoices) {
  const std::vector<float> v = {0.5f, -1.25f, 3.0f, 1e-3f};
  const ApiRequest r = completions(R"({"prompt": [1, 2], "n": 2, "best_of": 3, "interventions": [
      {"type": "add", "name": "layers.0.layer_output", "vector": ")" + f32_base64(v) + R"(", "coefficient": 2}]})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].choices, 3);
  const std::shared_ptr<const trace::TraceSpec>& t = r.prompts[0].trace;
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->reads.empty());
  ASSERT_EQ(t->interventions.size(), 1u);
  EXPECT_EQ(t->interventions[0].vector, v);
  EXPECT_EQ(t->interventions[0].coefficient, 2.0f);
  EXPECT_EQ(t->interventions[0].layers, (std::vector<int64_t>{0}));
  EXPECT_EQ(t->prompt_len, 2);
}

TEST(TraceApi, RefusalsNameTheField) {
  const Refusal unknown = refusal("unknown name", [] {
    completions(R"({"prompt": [1], "activations": ["layers.0.layer_output", "layers.0.no_such_name"]})");
  });
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(unknown.param, "activations[1]") << "the parser's path to the entry";
  EXPECT_THAT(unknown.message, HasSubstr("no_such_name"));
  const Refusal layer = refusal("layer out of range", [] {
    completions(R"({"prompt": [1], "activations": ["layers.2.layer_output"]})");
  });
  EXPECT_EQ(layer.status, 400);
  EXPECT_EQ(layer.param, "activations[0]");
  EXPECT_THAT(layer.message, HasSubstr("layer 2"));
  const Refusal vector = refusal("vector of the wrong length", [] {
    completions(R"({"prompt": [1], "interventions": [{"type": "add", "name": "layers.0.layer_output", "vector": ")" +
                f32_base64({1, 2, 3}) + R"("}]})");
  });
  EXPECT_EQ(vector.status, 400);
  EXPECT_EQ(vector.param, "interventions[0].vector");
  EXPECT_THAT(vector.message, HasSubstr("12 bytes"));
  const Refusal not_a_list = refusal("not a list", [] { completions(R"({"prompt": [1], "activations": "logits"})"); });
  EXPECT_EQ((std::tuple(not_a_list.status, not_a_list.param)), (std::tuple(400, std::string("activations"))));
  for (const std::string choices : {R"("n": 2)", R"("best_of": 2)"}) {
    const Refusal many = refusal(choices, [&] {
      completions(R"({"prompt": [1], "activations": ["logits"], )" + choices + "}");
    });
    EXPECT_EQ((std::tuple(many.status, many.param)), (std::tuple(400, std::string("activations")))) << choices;
    EXPECT_THAT(many.message, HasSubstr("activations need one choice (n = 1 and best_of = 1)")) << choices;
  }
  const Refusal chat_many = refusal("chat n 2", [] {
    chat(R"({"messages": [{"role": "user", "content": "Hi"}], "n": 2, "activations": ["logits"]})");
  });
  EXPECT_EQ((std::tuple(chat_many.status, chat_many.param)), (std::tuple(400, std::string("activations"))));
  // A misspelt field is still an unknown field, never ignored.
  const Refusal typo = refusal("typo", [] { completions(R"({"prompt": [1], "activation": ["logits"]})"); });
  EXPECT_EQ((std::tuple(typo.status, typo.param)), (std::tuple(400, std::string("activation"))));
}

TEST(TraceApi, AWorstCaseOverTheLimitIsRefusedWithBothNumbers) {
  ServedModel m = traced_model();
  // logits of 3 prompt positions and 2 − 1 fed generated tokens: 4 × 100352 f32.
  const int64_t bytes = 4 * kModel.vocab_size * 4;
  const std::string body = R"({"prompt": [1, 2, 3], "max_tokens": 2, "activations": ["logits"]})";
  m.max_activation_bytes = bytes;
  ASSERT_NE(completions(body, m).prompts[0].trace, nullptr) << "exactly the limit is accepted";
  m.max_activation_bytes = bytes - 1;
  const Refusal over = refusal("over", [&] { completions(body, m); });
  EXPECT_EQ((std::tuple(over.status, over.param)), (std::tuple(400, std::string("activations"))));
  EXPECT_THAT(over.message, HasSubstr("activations: this request could return " + std::to_string(bytes) +
                                      " bytes, over the server's --max-activation-bytes " +
                                      std::to_string(bytes - 1)));
  // A batch of prompts is bounded as one request: two prompts of the same worst case
  // together are over a limit each alone is within.
  m.max_activation_bytes = bytes;
  const Refusal batch = refusal("batch", [&] {
    completions(R"({"prompt": [[1, 2, 3], [4, 5, 6]], "max_tokens": 2, "activations": ["logits"]})", m);
  });
  EXPECT_EQ((std::tuple(batch.status, batch.param)), (std::tuple(400, std::string("activations"))));
  EXPECT_THAT(batch.message, HasSubstr("could return " + std::to_string(2 * bytes) + " bytes"));
  m.max_activation_bytes = 2 * bytes;
  EXPECT_EQ(completions(R"({"prompt": [[1, 2, 3], [4, 5, 6]], "max_tokens": 2, "activations": ["logits"]})", m)
                .prompts.size(),
            2u);
  m.max_activation_bytes = bytes - 1;
  // A norm over the feature axis is one float per position: well within.
  const ApiRequest norm = completions(
      R"({"prompt": [1, 2, 3], "max_tokens": 2, "activations": [{"name": "logits", "reduce": "norm"}]})", m);
  EXPECT_NE(norm.prompts[0].trace, nullptr);
  // Interventions alone return nothing: no limit.
  m.max_activation_bytes = 1;
  const ApiRequest steer = completions(R"({"prompt": [1, 2, 3], "interventions": [{"type": "add", "name":
      "layers.1.layer_output", "vector": ")" + f32_base64({1, 2, 3, 4}) + R"("}]})", m);
  EXPECT_NE(steer.prompts[0].trace, nullptr);
}

TEST(TraceApi, ChatAcceptsTheFieldsForItsRenderedPrompt) {
  const ApiRequest r = chat(R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
      "activations": [{"name": "layers.0.layer_output", "positions": "prompt"}]})");
  ASSERT_EQ(r.prompts.size(), 1u);
  ASSERT_NE(r.prompts[0].trace, nullptr);
  EXPECT_EQ(r.prompts[0].trace->prompt_len, static_cast<int64_t>(r.prompts[0].prompt.size()));
  EXPECT_GT(r.prompts[0].trace->prompt_len, 1);
  EXPECT_EQ(r.prompts[0].trace->reads[0].positions.kind, trace::PositionSelector::Kind::Prompt);
}

/// What the engine puts on a choice's last chunk.
json activations_object() {
  return {{"layers.0.layer_output",
           {{"shape", {2, 4}}, {"dtype", "float32"}, {"positions", {0, 2}}, {"reduce", "none"}, {"data", "AAAA"}}}};
}

CompletionChunk last_chunk(const std::string& text, int32_t id, bool with_activations) {
  CompletionChunk c = chunk(0, text, {token(id)}, "length");
  if (with_activations) c.activations = activations_object();
  return c;
}

TEST(TraceApi, TheBodysChoiceCarriesItsActivations) {
  const ApiRequest r = completions(R"({"prompt": [1, 2], "max_tokens": 2, "activations": ["layers.0.layer_output"]})");
  const auto body = [&](bool with) {
    CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
    a.feed(0, chunk(0, "a", {token(5)}));
    a.feed(0, last_chunk("b", 6, with));
    return a.body();
  };
  const json with = body(true), without = body(false);
  ASSERT_EQ(with["choices"].size(), 1u);
  EXPECT_EQ(with["choices"][0]["activations"], activations_object());
  EXPECT_EQ(with["choices"][0]["text"], "ab");
  EXPECT_FALSE(without["choices"][0].contains("activations"));
  json stripped = with;
  stripped["choices"][0].erase("activations");
  EXPECT_EQ(dump_json(stripped), dump_json(without)) << "every other byte as without";
  // Chat alike.
  const ApiRequest c = chat(R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
      "activations": ["layers.0.layer_output"]})");
  ChatAssembler ca(c, tokenizer(), "m", "chatcmpl-test", kCreated);
  ca.feed(0, last_chunk("b", 6, true));
  EXPECT_EQ(ca.body()["choices"][0]["activations"], activations_object());
  EXPECT_EQ(ca.body()["choices"][0]["message"]["content"], "b");
}

TEST(TraceApi, TheStreamsFinalEventOfTheChoiceCarriesItsActivations) {
  const ApiRequest r = completions(R"({"prompt": [1, 2], "max_tokens": 2, "stream": true,
      "stream_options": {"include_usage": true}, "activations": ["layers.0.layer_output"]})");
  const auto events = [&](bool with) {
    CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
    std::vector<std::string> out = a.feed(0, chunk(0, "a", {token(5)}));
    for (const std::string& e : a.feed(0, last_chunk("b", 6, with))) out.push_back(e);
    for (const std::string& e : a.finish()) out.push_back(e);
    return out;
  };
  const std::vector<std::string> with = events(true), without = events(false);
  ASSERT_EQ(with.size(), 4u);  // two chunks, usage, [DONE]
  ASSERT_EQ(without.size(), 4u);
  EXPECT_FALSE(event_json(with[0])["choices"][0].contains("activations"));
  const json last = event_json(with[1]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["choices"][0]["activations"], activations_object());
  EXPECT_EQ(with[0], without[0]);
  json stripped = last;
  stripped["choices"][0].erase("activations");
  EXPECT_EQ(sse_event(dump_json(stripped)), without[1]) << "every other byte as without";
  EXPECT_EQ(with[2], without[2]);
  EXPECT_EQ(with[3], "data: [DONE]\n\n");
  // Chat's final delta event alike.
  const ApiRequest c = chat(R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": true,
      "activations": ["layers.0.layer_output"]})");
  ChatAssembler ca(c, tokenizer(), "m", "chatcmpl-test", kCreated);
  EXPECT_FALSE(event_json(ca.feed(0, chunk(0, "a", {token(5)})).at(0))["choices"][0].contains("activations"));
  const std::vector<std::string> chat_last = ca.feed(0, last_chunk("b", 6, true));
  ASSERT_EQ(chat_last.size(), 1u);
  EXPECT_EQ(event_json(chat_last[0])["choices"][0]["activations"], activations_object());
}

}  // namespace
}  // namespace olmo2
