// `mpirun olmo2 serve --tp 2` and `--pp 2` (docs/architecture.md §8): concurrent greedy
// requests get exactly the single-process server's answers, seeded sampling too; with
// prefix caching on and off each layout gives the same bits; an Olmo 3 model's answers
// (sliding windows over released KV blocks, YaRN) in tp 2 and pp 2 too; SIGTERM
// to every rank (what Slurm's scancel does) and SIGUSR1 to mpirun both stop accepting at
// once, let a request that is streaming then run to its end, and end every rank with
// status 0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "tests/launcher/serve_fixture.h"

namespace olmo2 {
namespace {

using json = nlohmann::json;
using test::Server;

// Context 1024: the in-flight request of the stop tests runs for seconds.
const test::ServeModel& model() {
  static const test::ServeModel m(1024);
  return m;
}

constexpr int kLong = 300;
const std::string kLongStream = R"({"prompt":"Count:","max_tokens":)" + std::to_string(kLong) +
                                R"(,"temperature":0,"ignore_eos":true,"stream":true,"logprobs":0,"stream_options":{"include_usage":true}})";

/// Runs `stop` while a long streamed request is in flight (its first token arrived) and
/// checks the grace path: the server stops accepting while the request still streams,
/// the request then runs to its end, and every rank exits 0.
void stop_with_a_request_in_flight(Server& server, const std::function<void()>& stop) {
  test::StreamedRequest req(server, kLongStream);
  ASSERT_TRUE(req.wait_for_tokens(1, 60)) << server.log();
  stop();
  ASSERT_TRUE(test::wait_until([&] { return !server.accepting(); }, 20, "the server to stop accepting connections"))
      << server.log();
  const int64_t at_stop = req.tokens();
  EXPECT_LT(at_stop, kLong) << "the request ended before the stop: nothing was in flight";
  ASSERT_TRUE(req.finish(30));
  EXPECT_TRUE(req.error().is_null()) << req.error();
  EXPECT_EQ(req.tokens(), kLong) << at_stop << " tokens had arrived when the server stopped accepting";
  EXPECT_EQ(req.finish_reason(), "length");
  EXPECT_EQ(req.completion_tokens(), kLong) << req.usage();
  EXPECT_TRUE(req.done());
  EXPECT_EQ(server.process.wait_for(60), 0) << server.log();
}

const std::string kMpirun = std::string(OLMO2_MPIEXEC) + " -np 2 --oversubscribe --allow-run-as-root --bind-to none";

std::vector<std::string> bodies() {
  std::vector<std::string> b;
  const char* prompts[] = {"The river", "In 1848 the", "def main():", "Zwei Männer", "🙂 emoji", "A", "Once upon", "x = 3;"};
  for (int i = 0; i < 8; ++i) {
    const std::string sampling = i % 3 == 2 ? R"("temperature":0.8,"top_k":40,"seed":)" + std::to_string(i)
                                            : R"("temperature":0)";
    b.push_back(R"({"prompt":)" + json(prompts[i]).dump() + R"(,"max_tokens":10,"ignore_eos":true,"logprobs":2,)" +
                sampling + "}");
  }
  return b;
}

std::vector<json> concurrently(const Server& s, const std::vector<std::string>& b) {
  std::vector<json> out(b.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < b.size(); ++i) threads.emplace_back([&, i] { out[i] = s.complete(b[i]).second; });
  for (auto& t : threads) t.join();
  return out;
}

std::vector<json> reference() {
  static const std::vector<json> ref = [] {
    Server one(model().path, "");
    return concurrently(one, bodies());
  }();
  return ref;
}

void expect_same(const std::vector<json>& got, const char* layout, const std::vector<json>& ref = reference(),
                 double logprob_tolerance = 1e-4) {
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(got[i].contains("choices")) << layout << ": " << got[i];
    EXPECT_EQ(got[i]["choices"][0]["text"], ref[i]["choices"][0]["text"]) << layout << " request " << i;
    EXPECT_EQ(got[i]["choices"][0]["logprobs"]["tokens"], ref[i]["choices"][0]["logprobs"]["tokens"]) << layout;
    const json& a = got[i]["choices"][0]["logprobs"]["token_logprobs"];
    const json& b = ref[i]["choices"][0]["logprobs"]["token_logprobs"];
    for (size_t t = 0; t < a.size(); ++t) EXPECT_NEAR(a[t].get<double>(), b[t].get<double>(), logprob_tolerance) << layout;
  }
}

TEST(ServeUnderMpirun, TensorParallelAnswersEqualOneProcess) {
  Server server(model().path, "--tp 2", kMpirun);
  expect_same(concurrently(server, bodies()), "tp 2");
  // Slurm's scancel: SIGTERM to every rank.
  // (Only the ranks: the pattern starts with the binary, so mpirun's own command line does not match.)
  stop_with_a_request_in_flight(server, [&] {
    const std::string pkill =
        "pkill -TERM -f -- '^" + std::string(OLMO2_BINARY) + " serve .*--port-file " + server.logs.file("port") + "'";
    EXPECT_EQ(std::system(pkill.c_str()), 0) << pkill << " signalled no process";
  });
}

// The overflowing steering of the hostile-client probe at tp 2 and pp 2: the same 400.
TEST(ServeUnderMpirun, SteeringThatOverflowsIsA400InEveryLayout) {
  for (const char* layout : {"--tp 2", "--pp 2"}) {
    Server server(model().path, layout, kMpirun);
    test::expect_overflowing_steering_is_refused(server, 64, layout);
  }
}

TEST(ServeUnderMpirun, PipelineAnswersEqualOneProcess) {
  Server server(model().path, "--pp 2 --max-batch-tokens 32 --max-running-requests 8", kMpirun);
  expect_same(concurrently(server, bodies()), "pp 2");
  // mpirun forwards SIGUSR1 to every rank.
  stop_with_a_request_in_flight(server, [&] { server.process.signal(SIGUSR1); });
}

TEST(ServeUnderMpirun, Bf16AnswersInEveryLayout) {
  // --precision bf16 (weights rounded to bf16 and held so, docs/architecture.md §3.2).
  // Pipeline stages compute exactly what one process computes; tensor-parallel ranks
  // add the row-parallel partial products in another order, so logprobs may move by
  // bf16 noise (2^-8 relative on the logits) but the tokens stay.
  std::vector<json> ref;
  {
    Server one(model().path, "--precision bf16");
    ref = concurrently(one, bodies());
    EXPECT_THAT(one.log(), ::testing::ContainsRegex("positions, bf16 with (avx512bf16|avx2|portable) batch-invariant products"));
    ASSERT_TRUE(ref[0].contains("choices")) << ref[0] << one.log();
  }
  Server pp(model().path, "--precision bf16 --pp 2 --max-batch-tokens 32 --max-running-requests 8", kMpirun);
  expect_same(concurrently(pp, bodies()), "bf16 pp 2", ref, 0.0);
  pp.process.signal(SIGUSR1);
  EXPECT_EQ(pp.process.wait_for(60), 0) << pp.log();
  Server tp(model().path, "--precision bf16 --tp 2", kMpirun);
  expect_same(concurrently(tp, bodies()), "bf16 tp 2", ref, 0.05);
  tp.process.signal(SIGUSR1);
  EXPECT_EQ(tp.process.wait_for(60), 0) << tp.log();
  // bf16 is not fp32: the same requests in fp32 give other logprobs.
  const std::vector<json> fp32 = reference();
  double moved = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const json& a = ref[i]["choices"][0]["logprobs"]["token_logprobs"];
    const json& b = fp32[i]["choices"][0]["logprobs"]["token_logprobs"];
    moved = std::max(moved, std::fabs(a[0].get<double>() - b[0].get<double>()));
  }
  EXPECT_GT(moved, 1e-4);
}

TEST(ServeUnderMpirun, PrefixCachingKeepsEveryLayoutsBits) {
  const std::vector<std::string> bodies = test::shared_prefix_bodies();
  for (const std::string layout : {"--tp 2", "--pp 2 --max-batch-tokens 32 --max-running-requests 8"}) {
    Server on(model().path, layout, kMpirun), off(model().path, layout + " --no-prefix-caching", kMpirun);
    test::expect_prefix_caching_keeps_the_bits(on, off, bodies, layout);
    for (Server* s : {&on, &off}) {
      s->process.signal(SIGUSR1);
      EXPECT_EQ(s->process.wait_for(60), 0) << s->log();
    }
  }
}

// Olmo 3 (sliding-window and YaRN layers, docs/architecture.md §3): prompts of 20 … 40
// tokens and 40-token answers, longer than the window (8) and YaRN's original context
// (32), in blocks of 4 positions that the sliding KV groups release as the window passes
// them (docs/architecture.md §8): tp 2 and pp 2 answer what one process answers, as for
// OLMo 2.
TEST(ServeUnderMpirun, Olmo3AnswersEqualOneProcessInEveryLayout) {
  static const test::ServeModel olmo3(128, true);
  std::vector<std::string> b;
  const char* prompts[] = {"The river ran past the mill, the church and the school, and on to the sea where the",
                           "In 1848 the revolutions spread from Paris to Vienna, Berlin, Milan and Budapest, and",
                           "def main():\n    total = 0\n    for i in range(10):\n        total += i * i\n",
                           "Zwei Männer gingen über die Brücke, und der eine sagte zu dem anderen, dass"};
  for (int i = 0; i < 4; ++i) {
    const std::string sampling = i == 3 ? R"("temperature":0.8,"top_k":40,"seed":3)" : R"("temperature":0)";
    b.push_back(R"({"prompt":)" + json(prompts[i]).dump() + R"(,"max_tokens":40,"ignore_eos":true,"logprobs":2,)" +
                sampling + "}");
  }
  const std::string opts = "--block-size 4 --max-batch-tokens 32 --max-running-requests 8";
  std::vector<json> ref;
  {
    Server one(olmo3.path, opts);
    ref = concurrently(one, b);
    ASSERT_TRUE(ref[0].contains("choices")) << ref[0] << one.log();
  }
  for (const std::string layout : {"--tp 2", "--pp 2"}) {
    Server server(olmo3.path, opts + " " + layout, kMpirun);
    expect_same(concurrently(server, b), layout.c_str(), ref);
    server.process.signal(SIGUSR1);
    EXPECT_EQ(server.process.wait_for(60), 0) << server.log();
  }
}

/// How many error lines olmo2 printed (mpirun adds its own lines about the exit).
size_t errors(const std::string& err) {
  size_t n = 0;
  for (size_t at = err.find("olmo2: error:"); at != std::string::npos; at = err.find("olmo2: error:", at + 1)) ++n;
  return n;
}

// A world other than tp × pp is one message from Topology::make (the rank session's
// max_dp 1: serve has no data parallelism), printed once.
TEST(ServeUnderMpirun, ALayoutTheJobCannotTakeIsReportedOnce) {
  auto r = test::run_olmo2_with(kMpirun + " " + OLMO2_BINARY, "serve --model " + model().path + " --tp 2 --pp 2");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, ::testing::HasSubstr("olmo2: error: invalid layout: world 2 ≠ tp 2 × pp 2 = 4: this command takes no data "
                                          "parallelism (dp 1), so start it on 4 ranks"));
  EXPECT_EQ(errors(r.err), 1) << r.err;
  r = test::run_olmo2_with(kMpirun + " " + OLMO2_BINARY, "serve --model " + model().path);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, ::testing::HasSubstr("olmo2: error: invalid layout: tp 1 × pp 1 × dp 2 = world 2, but this "
                                          "command takes at most dp 1: start it on tp × pp × 1 = 1 rank"));
  EXPECT_EQ(errors(r.err), 1) << r.err;
}

}  // namespace
}  // namespace olmo2
