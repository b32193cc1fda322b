// `olmo2 serve` as a real process over HTTP (docs/architecture.md §8): requests that must
// not hurt the server (§11.6) and stop strings while streaming (§11.7), 64 concurrent
// requests each answered exactly as alone, the same bits with prefix caching on and off,
// client disconnects, the API key (also from OLMO2_API_KEY), --tokenizer, a full queue,
// and the stop signal's grace period, with a request provably in flight when it arrives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

#include "tests/launcher/serve_fixture.h"

namespace olmo2 {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using test::Server;

const test::ServeModel& model() {
  static const test::ServeModel m;
  return m;
}

/// Waits (up to 60 s) until the server runs `n` requests; a failure saying so after that.
::testing::AssertionResult wait_until_running(const Server& server, int n = 1) {
  return test::wait_until([&] { return server.metrics()["olmo2_serve_running_requests"] >= n; }, 60,
                          "olmo2_serve_running_requests >= " + std::to_string(n));
}

/// The model of the shutdown tests: context 1024, so that one request can run for
/// seconds (kLong tokens) and still be running when the signal comes after its first token.
const test::ServeModel& long_context_model() {
  static const test::ServeModel m(1024);
  return m;
}
constexpr int kLong = 500;
const std::string kLongStream = R"({"prompt":"Count:","max_tokens":)" + std::to_string(kLong) +
                                R"(,"temperature":0,"ignore_eos":true,"stream":true,"logprobs":0,"stream_options":{"include_usage":true}})";
const std::string kShutDown = "the server shut down before this request finished";

std::string greedy(const std::string& prompt, int max_tokens, const std::string& extra = "") {
  return R"({"prompt":)" + prompt + R"(,"max_tokens":)" + std::to_string(max_tokens) +
         R"(,"temperature":0,"ignore_eos":true)" + extra + "}";
}

TEST(Serve, CaseC6BadRequestsHurtNothing) {
  Server fresh(model().path, "");
  const auto [s0, ref] = fresh.complete(greedy("\"The capital of France is\"", 8));
  ASSERT_EQ(s0, 200) << ref;
  Server server(model().path, "");
  // Loopback unless --host says otherwise.
  EXPECT_THAT(server.log(), HasSubstr("on http://127.0.0.1:" + std::to_string(server.port) + " "));
  EXPECT_THAT(server.log(), HasSubstr("; chat template: none)"));  // the test model has none
  auto expect_400 = [&](const std::string& body, const std::string& param, const std::string& text) {
    const auto [status, j] = server.complete(body);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(j["error"]["param"], param.empty() ? json(nullptr) : json(param)) << j;
    EXPECT_THAT(j["error"]["message"].get<std::string>(), HasSubstr(text)) << body;
  };
  expect_400(R"({"prompt":"","max_tokens":16})", "prompt", "empty");
  expect_400(R"({"prompt":"Hi","max_tokens":0})", "max_tokens", "max_tokens must be at least 1");
  std::string ids129 = "[";
  for (int i = 0; i < 129; ++i) ids129 += (i ? ",1000" : "1000");
  expect_400(ids129 + "]", "", "");  // not an object: a list
  expect_400(R"({"prompt":)" + ids129 + R"(],"max_tokens":1})", "prompt", "129 tokens and the context length is 128");
  std::string ids124 = "[1000";
  for (int i = 1; i < 124; ++i) ids124 += ",1000";
  expect_400(R"({"prompt":)" + ids124 + R"(],"max_tokens":16})", "max_tokens",
             "prompt of 124 tokens + max_tokens 16 exceeds the context length 128");
  expect_400("this is not json", "", "not valid JSON");
  expect_400(R"({"prompt":5})", "prompt", "a string or a list of token ids");
  expect_400(R"({"prompt":"Hi","temperature":-1})", "temperature", "temperature");
  const auto [s1, again] = server.complete(greedy("\"The capital of France is\"", 8));
  ASSERT_EQ(s1, 200);
  EXPECT_EQ(again["choices"][0]["text"], ref["choices"][0]["text"]);
  EXPECT_EQ(again["usage"], ref["usage"]);
  const auto m = server.metrics();
  EXPECT_EQ(m.at("olmo2_serve_requests_total{outcome=\"invalid\"}"), 8);
  EXPECT_EQ(m.at("olmo2_serve_requests_total{outcome=\"success\"}"), 1);
  EXPECT_EQ(server.process.wait_for(0), -1) << "the server exited";
}

TEST(Serve, CaseC7StopStringsWhileStreaming) {
  Server server(model().path, "");
  // The model's greedy continuation, with its tokens' texts.
  const auto [s0, plain] = server.complete(greedy("\"Once upon a time\"", 24, R"(,"logprobs":0)"));
  ASSERT_EQ(s0, 200) << plain;
  const json& toks = plain["choices"][0]["logprobs"]["tokens"];
  std::string stop;
  for (int i = 6; i < 10; ++i) stop += toks[i].get<std::string>();  // four tokens long
  const std::string full = plain["choices"][0]["text"];
  const size_t cut = full.find(stop);
  ASSERT_NE(cut, std::string::npos);
  const std::string body = greedy("\"Once upon a time\"", 24, R"(,"stop":[)" + json(stop).dump() + "]");
  const auto [s1, whole] = server.complete(body);
  ASSERT_EQ(s1, 200);
  EXPECT_EQ(whole["choices"][0]["text"], full.substr(0, cut));
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  // Streamed: the deltas add up to the same text; nothing of the stop string is sent.
  std::string events;
  auto r = server.client().Post("/v1/completions",
                                body.substr(0, body.size() - 1) + R"(,"stream":true,"stream_options":{"include_usage":true}})",
                                "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_THAT(r->get_header_value("Content-Type"), HasSubstr("text/event-stream"));
  std::string streamed, finish;
  json usage;
  std::istringstream in(r->body);
  std::vector<std::string> data;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) == 0) data.push_back(line.substr(6));
  }
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const json e = json::parse(data[i]);
    if (e["choices"].empty()) {  // include_usage: the last chunk, usage only
      EXPECT_EQ(i + 2, data.size()) << "the usage chunk comes last, before [DONE]";
      usage = e["usage"];
      continue;
    }
    EXPECT_TRUE(e["usage"].is_null()) << "with include_usage, content chunks carry usage null: " << e;
    streamed += e["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(streamed, full.substr(0, streamed.size())) << "a delta left the non-streamed text";
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(streamed, full.substr(0, cut));
  EXPECT_EQ(finish, "stop");
  EXPECT_EQ(usage, whole["usage"]);
}

TEST(Serve, SixtyFourConcurrentRequestsGetWhatTheyGetAlone) {
  // A small cache (32 blocks of 16) and a 64-token step budget: prompts are prefilled in
  // chunks, and sequences are pre-empted and recomputed while the batch grows.
  Server server(model().path, "--kv-cache-memory 256KiB --max-batch-tokens 64 --max-running-requests 64");
  std::mt19937 rng(5);
  std::vector<std::string> bodies;
  for (int i = 0; i < 64; ++i) {
    json ids = json::array();
    const int n = 3 + static_cast<int>(rng() % 60);
    for (int t = 0; t < n; ++t) ids.push_back(1000 + static_cast<int>(rng() % 40000));
    const std::string sampling = i % 4 == 3 ? R"(,"temperature":0.9,"top_p":0.95,"seed":)" + std::to_string(i) : "";
    bodies.push_back(R"({"prompt":)" + ids.dump() + R"(,"max_tokens":12,"ignore_eos":true)" +
                     (sampling.empty() ? R"(,"temperature":0)" : sampling) + "}");
  }
  std::vector<json> alone(64), together(64);
  for (int i = 0; i < 64; ++i) {
    const auto [s, j] = server.complete(bodies[static_cast<size_t>(i)]);
    ASSERT_EQ(s, 200) << j;
    alone[static_cast<size_t>(i)] = j;
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&, i] { together[static_cast<size_t>(i)] = server.complete(bodies[static_cast<size_t>(i)]).second; });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(together[static_cast<size_t>(i)]["choices"][0]["text"], alone[static_cast<size_t>(i)]["choices"][0]["text"]) << "request " << i << together[static_cast<size_t>(i)];
    EXPECT_EQ(together[static_cast<size_t>(i)]["usage"]["completion_tokens"], 12) << "request " << i;
  }
  const auto m = server.metrics();
  EXPECT_GT(m.at("olmo2_serve_preemptions_total"), 0) << "the cache was meant to run out";
  EXPECT_EQ(m.at("olmo2_serve_requests_total{outcome=\"success\"}"), 128);
  EXPECT_EQ(m.at("olmo2_serve_time_to_first_token_seconds_count"), 128);
  EXPECT_EQ(m.at("olmo2_serve_generated_tokens_total"), 128 * 12);
  EXPECT_LE(m.at("olmo2_serve_time_to_first_token_seconds_sum"), m.at("olmo2_serve_end_to_end_latency_seconds_sum"));
  EXPECT_EQ(m.at("olmo2_serve_kv_cache_usage_ratio"), 0);
  EXPECT_EQ(m.at("olmo2_serve_running_requests"), 0);
}

// A bf16 KV cache (--kv-cache-dtype, docs/architecture.md §3.2): half the bytes per
// block, so 256 KiB holds 64 blocks of 16 (2 layers · 2 kv heads of 16 · 2 bytes · 2 · 16
// = 4 KiB) instead of 32; under bf16 (auto: bf16 pools) every answer, log-probabilities
// included, is the one f32 pools give.
TEST(Serve, Bf16KvCacheHoldsTwiceTheBlocksAndAnswersAsF32PoolsUnderBf16) {
  Server f32(model().path, "--precision bf16 --kv-cache-dtype f32 --kv-cache-memory 256KiB");
  Server bf16(model().path, "--precision bf16 --kv-cache-memory 256KiB");
  EXPECT_THAT(f32.log(), HasSubstr("(32 f32 KV blocks of 16"));
  EXPECT_THAT(bf16.log(), HasSubstr("(64 bf16 KV blocks of 16"));
  for (const char* prompt : {"\"Once upon a time\"", "\"The capital of France is\""}) {
    const std::string body = greedy(prompt, 24, R"(,"logprobs":3)");
    const auto [s0, want] = f32.complete(body);
    const auto [s1, got] = bf16.complete(body);
    ASSERT_EQ(s0, 200) << want;
    ASSERT_EQ(s1, 200) << got;
    EXPECT_EQ(got["choices"], want["choices"]) << prompt;
  }
}

// Weight-quantized serving (docs/architecture.md §3.2 "Quantized weights"): int4 answers,
// its start line names the format, and a request's tokens are those it gets alone while
// others share its steps (the quantized product is batch-invariant).
TEST(Serve, Int4WeightsAnswerAndKeepTheAnswersIndependentOfTheBatch) {
  Server server(model().path, "--weights int4 --kv-cache-memory 256KiB --max-batch-tokens 64");
  EXPECT_THAT(server.log(), HasSubstr("weights int4 (groups of 32; lm_head int8 per channel; quantized products "));
  std::vector<std::string> bodies;
  for (int i = 0; i < 8; ++i) {
    json ids = json::array();
    for (int t = 0; t < 5 + 7 * i; ++t) ids.push_back(1000 + (t * 7919 + i * 104729) % 40000);
    bodies.push_back(R"({"prompt":)" + ids.dump() + R"(,"max_tokens":8,"ignore_eos":true,"temperature":0})");
  }
  std::vector<json> alone(8), together(8);
  for (size_t i = 0; i < 8; ++i) {
    const auto [s, j] = server.complete(bodies[i]);
    ASSERT_EQ(s, 200) << j;
    EXPECT_EQ(j["usage"]["completion_tokens"], 8);
    alone[i] = j;
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 8; ++i) threads.emplace_back([&, i] { together[i] = server.complete(bodies[i]).second; });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(together[i]["choices"][0]["text"], alone[i]["choices"][0]["text"]) << "request " << i;
}

TEST(Serve, PrefixCachingGivesTheSameBits) {
  const std::vector<std::string> bodies = test::shared_prefix_bodies();
  Server on(model().path, ""), off(model().path, "--no-prefix-caching");
  EXPECT_THAT(on.log(), HasSubstr("prefix caching on"));
  EXPECT_THAT(off.log(), HasSubstr("prefix caching off"));
  test::expect_prefix_caching_keeps_the_bits(on, off, bodies, "one process");
}

TEST(Serve, ADisconnectedStreamIsCancelledAndItsBlocksFreed) {
  Server server(model().path, "");
  std::atomic<int> events{0};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = greedy("\"A long story:\"", 120, R"(,"stream":true)");
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++events < 3; };  // hang up
  auto c = server.client();
  c.send(req);
  EXPECT_GE(events.load(), 3);
  std::map<std::string, double> m;
  for (int i = 0; i < 100; ++i) {
    m = server.metrics();
    if (m["olmo2_serve_requests_total{outcome=\"cancelled\"}"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(m["olmo2_serve_requests_total{outcome=\"cancelled\"}"], 1);
  EXPECT_EQ(m["olmo2_serve_requests_total{outcome=\"success\"}"], 0);
  EXPECT_EQ(m["olmo2_serve_kv_cache_usage_ratio"], 0);
  EXPECT_EQ(m["olmo2_serve_running_requests"], 0);
  const auto [s, j] = server.complete(greedy("\"Still serving\"", 4));
  EXPECT_EQ(s, 200) << j;
}

TEST(Serve, ApiKeyLimitsAndRequestIds) {
  Server server(model().path, "--api-key sekret --max-running-requests 1 --max-waiting-requests 0 "
                              "--max-batch-tokens 16 --max-body-bytes 2000 --served-model-name tiny");
  const httplib::Headers key = {{"Authorization", "Bearer sekret"}};
  EXPECT_EQ(server.complete(greedy("\"Hi\"", 2)).first, 401);
  EXPECT_EQ(server.complete(greedy("\"Hi\"", 2), {{"Authorization", "Bearer wrong"}}).first, 401);
  EXPECT_EQ(server.client().Get("/health")->status, 200);
  EXPECT_EQ(server.client().Get("/metrics")->status, 200);
  EXPECT_EQ(server.client().Get("/v1/models")->status, 401);
  const auto models = json::parse(server.client().Get("/v1/models", key)->body);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["max_model_len"], 128);
  auto expect_400 = [&](const std::string& body, const std::string& param) {
    const auto [status, j] = server.complete(body, key);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(j["error"]["param"], param) << j;
  };
  expect_400(R"({"model":"other","prompt":"Hi"})", "model");
  expect_400(R"({"prompt":"Hi","n":2})", "n");
  expect_400(R"({"prompt":"Hi","top_p":1.5})", "top_p");
  expect_400(R"({"prompt":"Hi","top_p":0})", "top_p");
  // Over --max-body-bytes: 413, refused from its Content-Length before the body is read.
  const auto [too_big, tb] = server.complete(R"({"prompt":")" + std::string(3000, 'a') + "\"}", key);
  EXPECT_EQ(too_big, 413) << tb;
  EXPECT_EQ(tb["error"]["param"], "body") << tb;
  // Two requests with the same client id: each gets its own answer.
  const httplib::Headers same = {{"Authorization", "Bearer sekret"}, {"X-Request-Id", "same"}};
  const auto a = server.complete(greedy("\"Apples\"", 6), same), b = server.complete(greedy("\"Boats\"", 6), same);
  ASSERT_EQ(a.first, 200);
  ASSERT_EQ(b.first, 200);
  EXPECT_NE(a.second["id"], b.second["id"]);
  EXPECT_EQ(a.second["choices"][0]["text"], server.complete(greedy("\"Apples\"", 6), key).second["choices"][0]["text"]);
  EXPECT_NE(a.second["choices"][0]["text"], b.second["choices"][0]["text"]);
  // One running, none waiting: a second request while the first runs gets 503.
  std::thread first([&] { EXPECT_EQ(server.complete(greedy("\"Long\"", 126), key).first, 200); });
  std::map<std::string, double> m;
  EXPECT_TRUE(wait_until_running(server));  // (not ASSERT: `first` must be joined)
  const auto [busy, j] = server.complete(greedy("\"Hi\"", 2), key);
  first.join();
  EXPECT_EQ(busy, 503) << j;
  EXPECT_THAT(j["error"]["message"].get<std::string>(), HasSubstr("at capacity"));
  m = server.metrics();
  EXPECT_EQ(m["olmo2_serve_requests_total{outcome=\"rejected\"}"], 1);
  EXPECT_EQ(m["olmo2_serve_requests_total{outcome=\"invalid\"}"], 7);  // 2 × 401 on completions + 4 × 400 + 413
}

TEST(Serve, ApiKeyFromTheEnvironmentATokenizerOutsideTheModelDirectoryAndAChatTemplate) {
  // The model directory without its tokenizer.json: --tokenizer names the file instead.
  // (A plain Hugging Face directory: a checkpoint whose training_state.json lists a
  // tokenizer.json that is gone is refused as damaged, docs/architecture.md §7.)
  test::TempDir bare;
  for (const auto& f : std::filesystem::directory_iterator(model().path)) {
    const std::string name = f.path().filename().string();
    if (name == "tokenizer.json" || name.rfind("training_state.", 0) == 0) continue;
    std::filesystem::copy(f.path(), bare.file(f.path().filename().string()),
                          std::filesystem::copy_options::recursive);
  }
  // --chat-template's template sees the model's special tokens (tokenizer_config.json).
  std::ofstream(bare.file("chat.jinja")) << "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}";
  std::ofstream(bare.file("tokenizer_config.json")) << R"({"bos_token": {"content": "<|endoftext|>"}})";
  Server server(bare.path(),
                "--tokenizer " + test::source_path("data/dolma2-tokenizer.json") + " --chat-template " +
                    bare.file("chat.jinja"),
                "env OLMO2_API_KEY=from-env");
  EXPECT_THAT(server.log(), HasSubstr("chat template: " + bare.file("chat.jinja") + ")"));
  EXPECT_EQ(server.complete(greedy("\"Hi\"", 2)).first, 401);
  const auto [status, j] = server.complete(greedy("\"Hi\"", 2), {{"Authorization", "Bearer from-env"}});
  EXPECT_EQ(status, 200) << j;
  EXPECT_EQ(j["usage"]["prompt_tokens"], 1);  // "Hi" is dolma2's token 13347
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  // The chat prompt is the override's rendering: "<|endoftext|>" (dolma2's 100257) then "Hi".
  const std::string messages = R"({"messages": [{"role": "user", "content": "Hi"}]})";
  auto t = server.client().Post("/tokenize", {{"Authorization", "Bearer from-env"}}, messages, "application/json");
  ASSERT_TRUE(t);
  ASSERT_EQ(t->status, 200) << t->body;
  EXPECT_EQ(json::parse(t->body)["tokens"], json::parse("[100257, 13347]")) << t->body;
  auto chat = server.client().Post("/v1/chat/completions", {{"Authorization", "Bearer from-env"}},
                                   R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                                       "temperature": 0})",
                                   "application/json");
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(json::parse(chat->body)["usage"]["prompt_tokens"], 2) << chat->body;
  // A model's own template this server cannot run disables chat only: completions serve.
  std::ofstream(bare.file("tokenizer_config.json")) << R"({"chat_template": "{{ messages | frobnicate }}"})";
  Server plain(bare.path(), "--tokenizer " + test::source_path("data/dolma2-tokenizer.json"));
  EXPECT_THAT(plain.log(), HasSubstr("no chat template: "));
  EXPECT_THAT(plain.log(), HasSubstr("; chat template: none)"));
  EXPECT_EQ(plain.complete(greedy("\"Hi\"", 2)).first, 200);
}

TEST(Serve, HttpDetailsFromAFreshCloneReview) {
  Server server(model().path, "--api-key k");
  const httplib::Headers key = {{"Authorization", "bearer k"}};  // the scheme is case-insensitive
  auto c = server.client();
  // curl's default Content-Type is a form; httplib alone would cap such bodies at 8 KiB (413).
  std::string words;
  while (words.size() < 20000) words += "hello ";
  const std::string big = R"({"prompt":")" + words + R"(","max_tokens":2})";
  auto r = c.Post("/v1/completions", key, big, "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_THAT(r->body, HasSubstr("context length is 128"));
  // A deeply nested value in a checked field: a 400 naming it (not a crash).
  std::string deep = R"({"prompt":"a","seed":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  r = c.Post("/v1/completions", key, deep, "application/json");
  ASSERT_TRUE(r) << "the server died";
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("seed must be an integer, got a list"));
  r = c.Post("/v1/completions", key, R"({"prompt":"a","top_k":18446744073709551615})", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("top_k is too large"));
  // A known path with another method: 405 and Allow.
  r = c.Get("/v1/completions", key);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  EXPECT_EQ(c.Post("/health", "", "text/plain")->status, 405);
  EXPECT_EQ(server.complete(greedy("\"Hi\"", 2), key).first, 200);
  const auto m = server.metrics();
  EXPECT_EQ(m.at("olmo2_serve_requests_total{outcome=\"invalid\"}"), 4);  // big, deep, top_k, GET
}

// SIGTERM while a request streams: the server stops accepting connections at once, and
// the request, still streaming then, runs to its end within the grace period (30 s).
TEST(Serve, SigtermLetsTheRequestInFlightFinishAndExitsZero) {
  Server server(long_context_model().path, "");
  test::StreamedRequest req(server, kLongStream);
  ASSERT_TRUE(req.wait_for_tokens(1, 60)) << server.log();
  const auto signalled = std::chrono::steady_clock::now();
  server.process.signal(SIGTERM);
  ASSERT_TRUE(test::wait_until([&] { return !server.accepting(); }, 10, "the server to stop accepting connections"))
      << server.log();
  // What makes this a test of the grace path: the request was not finished when the
  // server had already stopped accepting.
  const int64_t at_stop = req.tokens();
  EXPECT_LT(at_stop, kLong) << "the request ended before the stop: nothing was in flight";
  ASSERT_TRUE(req.finish(30));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_EQ(req.status(), 200) << req.transport_error();
  EXPECT_TRUE(req.error().is_null()) << req.error();
  EXPECT_EQ(req.tokens(), kLong) << at_stop << " tokens had arrived when the server stopped accepting";
  EXPECT_EQ(req.finish_reason(), "length");
  EXPECT_EQ(req.completion_tokens(), kLong) << req.usage();
  EXPECT_TRUE(req.done()) << "no data: [DONE]";
  EXPECT_LT(took, 30) << "past the grace period";
  EXPECT_EQ(server.process.wait_for(30), 0) << server.log();
  EXPECT_THAT(server.log(), HasSubstr("stopping: no new requests"));
  EXPECT_FALSE(server.accepting()) << "still accepting connections";
}

// Past the grace period (0 s here) a request in flight is answered with the documented
// error: a streamed one with an error event and [DONE], a non-streamed one with 503.
TEST(Serve, PastTheGracePeriodInFlightRequestsAreAnsweredWithAnError) {
  Server server(long_context_model().path, "--shutdown-grace 0");
  test::StreamedRequest streamed(server, kLongStream);
  std::pair<int, json> plain;
  std::thread other([&] { plain = server.complete(greedy("\"Count:\"", kLong)); });
  ::testing::AssertionResult both_running = streamed.wait_for_tokens(1, 60);
  if (both_running) both_running = wait_until_running(server, 2);
  server.process.signal(SIGTERM);
  other.join();
  ASSERT_TRUE(both_running) << server.log();
  ASSERT_TRUE(streamed.finish(30));
  EXPECT_EQ(streamed.status(), 200) << streamed.transport_error();
  EXPECT_LT(streamed.tokens(), kLong);
  EXPECT_EQ(streamed.finish_reason(), "") << "a finish_reason: the request completed";
  EXPECT_EQ(streamed.error_message(), kShutDown) << streamed.error();
  EXPECT_EQ(streamed.error().is_object() ? streamed.error()["error"].value("code", 0) : 0, 503) << streamed.error();
  EXPECT_TRUE(streamed.done()) << "no data: [DONE] after the error";
  EXPECT_EQ(plain.first, 503) << plain.second;
  EXPECT_EQ(plain.second["error"]["message"], kShutDown) << plain.second;
  EXPECT_EQ(plain.second["error"]["type"], "service_unavailable") << plain.second;
  EXPECT_EQ(server.process.wait_for(30), 0) << server.log();
}

// A second signal ends the grace period: the request in flight gets the error at once.
TEST(Serve, ASecondSignalCancelsTheRequestsInFlight) {
  Server server(long_context_model().path, "");
  test::StreamedRequest req(server, kLongStream);
  ASSERT_TRUE(req.wait_for_tokens(1, 60)) << server.log();
  server.process.signal(SIGTERM);
  ASSERT_TRUE(test::wait_until([&] { return !server.accepting(); }, 10, "the server to stop accepting connections"))
      << server.log();
  server.process.signal(SIGTERM);
  ASSERT_TRUE(req.finish(30));
  EXPECT_LT(req.tokens(), kLong) << "the request completed: the second signal cancelled nothing";
  EXPECT_EQ(req.error_message(), kShutDown) << req.error();
  EXPECT_TRUE(req.done());
  EXPECT_EQ(server.process.wait_for(30), 0) << server.log();
  EXPECT_THAT(server.log(), HasSubstr("second signal: cancelling the requests in flight"));
}

// A client that sends its whole request and then shuts down its sending side
// (shutdown(SHUT_WR), as `nc -N` and some HTTP/1.0 clients do) still gets its answer:
// HTTP/1.1 lets a server answer after the client's FIN. Streamed and not. (A client that
// closes for good is still cancelled: serve_http.hostile_clients' hang-up case.)
TEST(Serve, AHalfClosedRequestIsAnswered) {
  Server server(model().path, "");
  for (const auto& [stream, version] : {std::pair{false, "1.1"}, {true, "1.1"}, {false, "1.0"}}) {
    const std::string body = greedy("\"The capital of France is\"", 6, stream ? R"(,"stream":true)" : "");
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK), a.sin_port = htons(static_cast<uint16_t>(server.port));
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string request = "POST /v1/completions HTTP/" + std::string(version) +
                                "\r\nHost: x\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
    std::string reply;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<size_t>(n));
    ::close(fd);
    // The server may send an interim 100 Continue first (its probe for a client that
    // closed for good; clients must accept one, RFC 9110's "Informational 1xx"), then the answer.
    const std::string interim = "HTTP/1.1 100 Continue\r\n\r\n";
    if (reply.rfind(interim, 0) == 0) {
      EXPECT_EQ(std::string(version), "1.1") << "no interim response to an HTTP/1.0 client";
      reply.erase(0, interim.size());
    }
    EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << (stream ? "streamed: " : "") << version << ": " << reply;
    EXPECT_THAT(reply, HasSubstr(stream ? "data: [DONE]" : "\"finish_reason\":\"length\"")) << reply;
  }
  EXPECT_TRUE(server.accepting());
}

// An intervention that passes validation but overflows the residual stream: a 400
// naming it (it used to be a 200 with "$$$$" and -9999 logprobs, nothing logged).
TEST(Serve, SteeringThatOverflowsIsA400NamingTheIntervention) {
  Server server(model().path, "");
  test::expect_overflowing_steering_is_refused(server, 64, "one process");
}

// --max-activation-memory bounds the reads of every request in the server together: a
// second request whose reads would not fit beside the first's waits (and the metrics say
// so) until the first is done, then runs; each is answered whole.
TEST(Serve, ActivationReadsBeyondTheServersBudgetWait) {
  static const test::ServeModel long_context(2048);
  // Each request may read layers.0.layer_output (64 f32 = 256 B a position) at up to
  // 5 + 1800 positions: ~460 KB; the budget holds one, not two.
  Server server(long_context.path, "--max-activation-bytes 512KiB --max-activation-memory 512KiB");
  const std::string body = R"({"prompt":"The capital of France is","max_tokens":1800,"ignore_eos":true,)"
                           R"("temperature":0,"stream":true,"activations":["layers.0.layer_output"]})";
  test::StreamedRequest first(server, body);
  ASSERT_TRUE(test::wait_until([&] { return server.metrics()["olmo2_serve_activation_memory_bytes"] > 0; }, 60,
                               "the first request's reservation"));
  test::StreamedRequest second(server, body);
  ASSERT_TRUE(test::wait_until([&] { return server.metrics()["olmo2_serve_activation_waiting_requests"] == 1; }, 60,
                               "the second request to wait"));
  const double reserved = server.metrics()["olmo2_serve_activation_memory_bytes"];
  EXPECT_GT(reserved, 400000) << "one request's worst case";
  EXPECT_LE(reserved, 512 * 1024);
  ASSERT_TRUE(first.finish(300));
  ASSERT_TRUE(second.finish(300));
  EXPECT_EQ(first.status(), 200);
  EXPECT_EQ(second.status(), 200);
  EXPECT_EQ(first.finish_reason(), "length");
  EXPECT_EQ(second.finish_reason(), "length") << second.error_message();
  const auto m = server.metrics();
  EXPECT_EQ(m.at("olmo2_serve_activation_memory_bytes"), 0);
  EXPECT_EQ(m.at("olmo2_serve_activation_waiting_requests"), 0);
  // A budget below what one request may read is refused at start.
  const test::RunResult bad = test::run_olmo2("serve --model " + model().path +
                                              " --port 0 --max-activation-bytes 1MiB --max-activation-memory 512KiB");
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("--max-activation-memory 524288 is below --max-activation-bytes 1048576"));
}

// --port 0: the kernel picks a free port, which the start line and the --port-file name
// (scripts and tests read it there instead of picking a port in advance and racing other
// processes for it); the file goes when the server stops. A port file in a folder that
// does not exist stops serve before it loads anything.
TEST(Serve, PortZeroIsAnnouncedInTheStartLineAndThePortFile) {
  std::string port_file;
  {
    Server server(model().path, "");
    ASSERT_GT(server.port, 0);
    port_file = server.logs.file("port");
    EXPECT_EQ(test::read_file(port_file), "127.0.0.1:" + std::to_string(server.port) + "\n");
    EXPECT_THAT(server.log(), HasSubstr("on http://127.0.0.1:" + std::to_string(server.port) + " ("));
    EXPECT_THAT(server.log(), ::testing::ContainsRegex(", 1 process on [^,]+, 1 thread from --threads;"));
    server.process.signal(SIGTERM);
    EXPECT_EQ(server.process.wait(), 0);
    EXPECT_FALSE(std::filesystem::exists(port_file)) << "the port file outlived the server";
  }
  const test::RunResult r = test::run_olmo2("serve --model " + model().path + " --port 0 --port-file /nonexistent/p");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err, "olmo2: error: --port-file /nonexistent/p: no folder /nonexistent\n");
}

// The start-up line names the code path of the products (fp32 here); a bad
// OLMO2_BATCH_INVARIANT_GEMM stops serve before it listens, with one line naming the value
// (not after: it would be left listening, its engine never started).
TEST(Serve, StartUpNamesTheProductPathAndABadOverrideStopsIt) {
  {
    Server server(model().path, "");
    EXPECT_THAT(server.log(), ::testing::ContainsRegex("fp32 with (avx512|avx2|portable) batch-invariant products"));
  }
  // (Under timeout: a serve that ignored the value would run until stopped.)
  const test::RunResult r =
      test::run_olmo2_with(std::string("OLMO2_BATCH_INVARIANT_GEMM=avx-512 timeout 60 ") + OLMO2_BINARY,
                           "serve --model " + model().path + " --threads 1 --port 0");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err, "olmo2: error: OLMO2_BATCH_INVARIANT_GEMM=avx-512: expected avx512, avx2 or portable\n");
}

}  // namespace
}  // namespace olmo2
