// `mpirun olmo2 serve --tp 2` and `--pp 2`: concurrent greedy requests get exactly the
// single-process server's answers, seeded sampling too; SIGTERM to every rank (what
// Slurm's scancel does) and SIGUSR1 to mpirun both end every rank with status 0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "tests/launcher/serve_fixture.h"

namespace olmo2 {
namespace {

using json = nlohmann::json;
using test::Server;

const test::ServeModel& model() {
  static const test::ServeModel m;
  return m;
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

void expect_same(const std::vector<json>& got, const char* layout) {
  const std::vector<json> ref = reference();
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(got[i].contains("choices")) << layout << ": " << got[i];
    EXPECT_EQ(got[i]["choices"][0]["text"], ref[i]["choices"][0]["text"]) << layout << " request " << i;
    EXPECT_EQ(got[i]["choices"][0]["logprobs"]["tokens"], ref[i]["choices"][0]["logprobs"]["tokens"]) << layout;
    const json& a = got[i]["choices"][0]["logprobs"]["token_logprobs"];
    const json& b = ref[i]["choices"][0]["logprobs"]["token_logprobs"];
    for (size_t t = 0; t < a.size(); ++t) EXPECT_NEAR(a[t].get<double>(), b[t].get<double>(), 1e-4) << layout;
  }
}

TEST(ServeUnderMpirun, TensorParallelAnswersEqualOneProcess) {
  Server server(model().path, "--tp 2", kMpirun);
  expect_same(concurrently(server, bodies()), "tp 2");
  // Slurm's scancel: SIGTERM to every rank.
  // (Only the ranks: the pattern starts with the binary, so mpirun's own command line does not match.)
  std::system(("pkill -TERM -f -- '^" + std::string(OLMO2_BINARY) + " serve .*--port " + std::to_string(server.port) + "'").c_str());
  EXPECT_EQ(server.process.wait_for(60), 0) << server.log();
}

TEST(ServeUnderMpirun, PipelineAnswersEqualOneProcess) {
  Server server(model().path, "--pp 2 --max-batch-tokens 32 --max-running-requests 8", kMpirun);
  expect_same(concurrently(server, bodies()), "pp 2");
  server.process.signal(SIGUSR1);  // mpirun forwards SIGUSR1 to every rank
  EXPECT_EQ(server.process.wait_for(60), 0) << server.log();
}

TEST(ServeUnderMpirun, ALayoutTheModelCannotTakeIsReportedOnce) {
  test::TempDir logs;
  const auto r = test::run_olmo2_with(kMpirun + " " + OLMO2_BINARY, "serve --model " + model().path + " --tp 2 --pp 2");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, ::testing::HasSubstr("serve runs on tp × pp = 2 × 2 = 4 ranks, but the job has 2"));
}

}  // namespace
}  // namespace olmo2
