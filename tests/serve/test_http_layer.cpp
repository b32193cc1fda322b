// The transport-neutral pieces of the HTTP front (docs/architecture.md §8, "HTTP
// front"): route matching and 405's Allow, the bytes a ResponseWriter puts on the wire
// (Content-Length, chunked framing, Connection: close, header injection), the bounded
// worker pool, and JSON bodies whose numbers overflow a double. The server itself is
// tested over raw sockets by http_hostile_clients.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "runtime/serve/api/api_error.h"
#include "runtime/serve/http/response_writer.h"
#include "runtime/serve/http/router.h"
#include "runtime/serve/http/worker_pool.h"
#include "runtime/serve/api/json_body.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;

http::Handler tagged(std::string* out, std::string tag) {
  return [out, tag](const http::Request&, http::ResponseWriter&) { *out = tag; };
}

TEST(HttpRouter, ExactRoutesWinThenTheLongestPrefixAndOtherMethodsAre405) {
  http::Router r;
  std::string hit;
  r.add("GET", "/v1/models", tagged(&hit, "list"));
  r.add_prefix("GET", "/v1/models/", tagged(&hit, "one"));
  r.add_prefix("GET", "/v1/models/special/", tagged(&hit, "special"));
  r.add_prefix("DELETE", "/v1/models/", tagged(&hit, "delete"));
  r.add("POST", "/v1/completions", tagged(&hit, "complete"));
  http::ResponseWriter* none = nullptr;
  auto run = [&](const http::Router::Match& m) {
    hit.clear();
    if (m.handler) (*m.handler)(http::Request{}, *none);
    return hit;
  };
  EXPECT_EQ(run(r.find("GET", "/v1/models")), "list");
  const auto one = r.find("GET", "/v1/models/olmo-2");
  EXPECT_EQ(run(one), "one");
  EXPECT_EQ(one.path_suffix, "olmo-2");
  const auto special = r.find("GET", "/v1/models/special/x");
  EXPECT_EQ(run(special), "special");
  EXPECT_EQ(special.path_suffix, "x");
  EXPECT_EQ(run(r.find("DELETE", "/v1/models/special/x")), "delete");
  EXPECT_EQ(r.find("GET", "/v1/models/").handler, nullptr) << "a prefix route needs something after the prefix";
  // A path some route knows under another method: no handler, Allow lists the methods.
  const auto post_only = r.find("GET", "/v1/completions");
  EXPECT_EQ(post_only.handler, nullptr);
  EXPECT_EQ(post_only.allow, "POST");
  EXPECT_EQ(r.find("PUT", "/v1/models/special/x").allow, "GET, DELETE");
  EXPECT_EQ(r.find("get", "/v1/models").allow, "GET") << "methods are case-sensitive";
  EXPECT_EQ(r.find("GET", "/nope").allow, "");
  EXPECT_THROW(r.add("GET", "/v1/models", tagged(&hit, "again")), std::invalid_argument);
  EXPECT_THROW(r.add("GET", "v1", tagged(&hit, "x")), std::invalid_argument);
}

/// Records what a ResponseWriter queues.
struct Recorder : http::ResponseChannel {
  std::string bytes;
  std::vector<bool> waited;
  bool alive = true, keep = true;
  int finishes = 0;
  bool reusable = false;
  bool queue(std::string b, bool wait) override {
    bytes += b;
    waited.push_back(wait);
    return alive;
  }
  bool client_gone() const override { return !alive; }
  void on_client_gone(std::function<void()> wake) override { this->wake = std::move(wake); }
  bool keep_alive() const override { return keep; }
  void finished(bool r) override { ++finishes, reusable = r; }
  std::function<void()> wake;
};

TEST(HttpResponseWriter, SendFramesOneResponseWithItsLength) {
  auto rec = std::make_shared<Recorder>();
  {
    http::ResponseWriter w(rec);
    w.send(404, "application/json", "{\"a\":1}", {{"X-Request-Id", "id\r\nSet-Cookie: x=1"}});
    EXPECT_TRUE(w.finished());
    EXPECT_THROW(w.send(200, "text/plain", ""), std::logic_error);
  }
  EXPECT_EQ(rec->bytes,
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
            "X-Request-Id: id  Set-Cookie: x=1\r\nContent-Length: 7\r\n\r\n{\"a\":1}");
  EXPECT_EQ(rec->waited, std::vector<bool>{false});
  EXPECT_EQ(rec->finishes, 1);
  EXPECT_TRUE(rec->reusable);
}

TEST(HttpResponseWriter, StreamsAreChunkedAndCloseWhenTheConnectionMust) {
  auto rec = std::make_shared<Recorder>();
  rec->keep = false;
  http::ResponseWriter w(rec);
  ASSERT_TRUE(w.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}));
  EXPECT_TRUE(w.write("data: 1\n\n"));
  EXPECT_TRUE(w.write(""));
  EXPECT_TRUE(w.write(std::string(300, 'x')));
  w.end();
  EXPECT_EQ(rec->bytes, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                        "9\r\ndata: 1\n\n\r\n12c\r\n" + std::string(300, 'x') + "\r\n0\r\n\r\n");
  EXPECT_EQ(rec->waited, (std::vector<bool>{true, true, true, false})) << "stream writes wait, the end does not";
  EXPECT_EQ(rec->finishes, 1);
}

TEST(HttpResponseWriter, AGoneClientFailsWritesAndAnAbandonedStreamIsAborted) {
  auto rec = std::make_shared<Recorder>();
  {
    http::ResponseWriter w(rec);
    ASSERT_TRUE(w.begin_stream(200, "text/event-stream"));
    rec->alive = false;
    EXPECT_FALSE(w.write("data: x\n\n"));
  }  // no end(): the writer aborts
  EXPECT_EQ(rec->finishes, 1);
  EXPECT_FALSE(rec->reusable) << "a cut stream must close its connection";
  EXPECT_EQ(rec->bytes.find("0\r\n\r\n"), std::string::npos) << "no last chunk after an abort";
  EXPECT_EQ(http::reason_phrase(431), "Request Header Fields Too Large");
  EXPECT_EQ(http::reason_phrase(299), "Unknown");
}

TEST(HttpWorkerPool, RunsTasksAndRefusesBeyondItsQueue) {
  http::WorkerPool pool(1, 1);
  std::promise<void> release;
  std::shared_future<void> go = release.get_future().share();
  std::atomic<int> ran{0};
  std::atomic<bool> started{false};
  ASSERT_TRUE(pool.try_post([&] {
    started = true;
    go.wait();
    ++ran;
  }));
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(pool.try_post([&] { ++ran; })) << "one may wait";
  EXPECT_FALSE(pool.try_post([&] { ++ran; })) << "a second may not";
  release.set_value();
  pool.stop();
  EXPECT_EQ(ran, 2);
  EXPECT_FALSE(pool.try_post([] {})) << "a stopped pool takes nothing";
}

TEST(JsonBody, ANumberBeyondADoubleIsA400NamingItsTopLevelField) {
  auto param_of = [](const std::string& text) -> std::string {
    try {
      parse_json_body(text);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      return e.param() + " | " + e.what();
    }
    return "accepted";
  };
  EXPECT_THAT(param_of(R"({"prompt":"a","temperature":1e999})"), HasSubstr("temperature | temperature: the number 1e999"));
  EXPECT_THAT(param_of(R"({"max_tokens":-2E+400,"prompt":"a"})"), HasSubstr("max_tokens | "));
  EXPECT_THAT(param_of(R"({"prompt":"a","logit_bias":{"7":{"x":[1,5e310]}}})"), HasSubstr("logit_bias | logit_bias:"));
  EXPECT_THAT(param_of("[1e999]"), HasSubstr(" | the request body: the number 1e999"));
  EXPECT_THAT(param_of(R"({"prompt": )"), HasSubstr(" | the request body is not valid JSON"));
  EXPECT_EQ(param_of(R"({"temperature":1e-999,"top_p":1.7976931348623157e308})"), "accepted")
      << "underflow is 0 and the largest double is a double";
  EXPECT_EQ(parse_json_body(R"({"a":1e-999})")["a"].get<double>(), 0.0);
}

}  // namespace
}  // namespace olmo2
