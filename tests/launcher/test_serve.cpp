// `olmo2 serve` as a real process over HTTP: cases C6 (bad requests hurt nothing) and
// C7 (stop strings while streaming), 64 concurrent requests each answered exactly as
// alone, client disconnects, the API key, a full queue, and SIGTERM.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

/// Waits (up to 60 s) until the server runs a request.
void wait_until_running(const Server& server) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < end && server.metrics()["olmo2_serve_running_requests"] < 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

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
  EXPECT_EQ(m.at("olmo2_serve_requests_total{outcome=\"error\"}"), 8);
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
  auto r = server.client().Post("/v1/completions", body.substr(0, body.size() - 1) + R"(,"stream":true})",
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
    streamed += e["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(streamed, full.substr(0, streamed.size())) << "a delta left the non-streamed text";
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"], usage = e["usage"];
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
  expect_400(R"({"prompt":")" + std::string(3000, 'a') + "\"}", "body");
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
  wait_until_running(server);
  const auto [busy, j] = server.complete(greedy("\"Hi\"", 2), key);
  first.join();
  EXPECT_EQ(busy, 503) << j;
  EXPECT_THAT(j["error"]["message"].get<std::string>(), HasSubstr("at capacity"));
  m = server.metrics();
  EXPECT_EQ(m["olmo2_serve_requests_total{outcome=\"rejected\"}"], 1);
  EXPECT_EQ(m["olmo2_serve_requests_total{outcome=\"error\"}"], 7);  // 2 × 401 on completions + 5 × 400
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
  EXPECT_EQ(m.at("olmo2_serve_requests_total{outcome=\"error\"}"), 4);  // big, deep, top_k, GET
}

TEST(Serve, SigtermFinishesInFlightRequestsAndExitsZero) {
  Server server(model().path, "");
  std::pair<int, json> result;
  std::thread inflight([&] { result = server.complete(greedy("\"Count:\"", 100)); });
  wait_until_running(server);
  server.process.signal(SIGTERM);
  inflight.join();
  EXPECT_EQ(result.first, 200) << result.second;
  EXPECT_EQ(result.second["usage"]["completion_tokens"], 100);
  EXPECT_EQ(server.process.wait_for(30), 0) << server.log();
  EXPECT_FALSE(server.client().Get("/health")) << "still accepting connections";
}

TEST(Serve, PastTheGracePeriodInFlightRequestsAreCancelled) {
  Server server(model().path, "--shutdown-grace 0");
  std::pair<int, json> result;
  std::thread inflight([&] { result = server.complete(greedy("\"Count:\"", 120)); });
  wait_until_running(server);
  server.process.signal(SIGTERM);
  inflight.join();
  EXPECT_EQ(result.first, 503) << result.second;
  EXPECT_THAT(result.second["error"]["message"].get<std::string>(), HasSubstr("shut down"));
  EXPECT_EQ(server.process.wait_for(30), 0) << server.log();
}

}  // namespace
}  // namespace olmo2
