// `olmo2 train --metrics-port`: a real run (one process, and tp 2 × pp 2 under mpirun)
// scraped over HTTP while it trains. Every training metric of docs/architecture.md §9 is there with
// its labels, every rank's step time and every layer's diagnostics arrive at rank 0's
// endpoint, the exposition passes `promtool check metrics`, counters only grow, and a
// port in use is refused at start on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/launcher/background.h"
#include "tests/launcher/metrics_text.h"
#include "tests/launcher/tiny_model.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;
using test::Background;
using test::port_from_file;

struct Tiny : test::TinyModel {
  /// A training command with its metrics on `port` (0: a free one, written to
  /// port_file()).
  std::string train(int port, const std::string& extra, int64_t steps = 1000000) const {
    return std::string(OLMO2_BINARY) + " train " + model_and_data() +
           " --seq-len 16 --global-batch 8 --micro-batch 2 --steps " + std::to_string(steps) +
           " --lr 1e-3 --threads 1 --log-interval 1000000 --diag-interval 5 --peak-tflops 0.1 --metrics-port " +
           std::to_string(port) + (port == 0 ? " --port-file " + port_file() : std::string()) + " " + extra;
  }
  std::string port_file() const { return dir.file("metrics.port"); }
};

/// Scrapes until olmo2_train_step ≥ `step` and returns that body; after 120 s, a test
/// failure saying so, and the last body.
std::string scrape_until(int port, double step) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2);
  std::string body;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    if (auto r = client.Get("/metrics"); r && r->status == 200) {
      body = r->body;
      const auto m = test::parse_metrics(body);
      if (auto it = m.find("olmo2_train_step"); it != m.end() && it->second >= step) return body;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ADD_FAILURE() << "gave up after 120 s scraping 127.0.0.1:" << port << " for olmo2_train_step >= " << step
                << "; last body:\n" << body;
  return body;
}

void expect_training_metrics(const std::string& body, int ranks, const std::string& what) {
  const auto m = test::parse_metrics(body);
  for (const char* name : {"olmo2_train_loss", "olmo2_train_z_loss", "olmo2_train_grad_norm", "olmo2_train_learning_rate",
                           "olmo2_train_step", "olmo2_train_last_step_timestamp_seconds", "olmo2_train_tokens_total",
                           "olmo2_train_tokens_per_second", "olmo2_train_model_flops_utilization",
                           "olmo2_train_nonfinite_steps_total", "olmo2_train_checkpoint_save_seconds_count"}) {
    EXPECT_TRUE(m.count(name)) << what << ": no " << name;
  }
  EXPECT_GT(m.at("olmo2_train_loss"), 0.5) << what;
  EXPECT_LT(m.at("olmo2_train_loss"), 6.0) << what;
  EXPECT_GT(m.at("olmo2_train_model_flops_utilization"), 0) << what;
  EXPECT_EQ(std::fmod(m.at("olmo2_train_tokens_total"), 128.0), 0.0) << what;
  for (const char* l : {"olmo2_train_skipped_steps_total{reason=\"nonfinite\"}", "olmo2_train_skipped_steps_total{reason=\"spike\"}",
                        "olmo2_train_spikes_total{signal=\"loss\"}", "olmo2_train_spikes_total{signal=\"grad_norm\"}"}) {
    EXPECT_TRUE(m.count(l)) << what << ": " << l << " (counters exist from the start)";
  }
  // Every rank's step time, labelled with its coordinates.
  int rank_series = 0;
  for (const auto& [k, v] : m) {
    if (k.starts_with("olmo2_train_step_seconds_count{")) {
      ++rank_series;
      EXPECT_GT(v, 0) << k;
    }
  }
  EXPECT_EQ(rank_series, ranks) << what;
  // Every rank's step breakdown (docs/architecture.md §9 "Step time breakdown"): five
  // phases, computing > 0 on each, the parts at most the step.
  int phases = 0;
  for (const auto& [k, v] : m) {
    if (!k.starts_with("olmo2_train_step_phase_seconds{")) continue;
    ++phases;
    EXPECT_GE(v, 0) << k;
    if (k.find("phase=\"compute\"") != std::string::npos) EXPECT_GT(v, 0) << k;
  }
  EXPECT_EQ(phases, 5 * ranks) << what;
  // Every layer's diagnostics, whichever stage holds it.
  for (int l = 0; l < 4; ++l) {
    const std::string sel = "{layer=\"" + std::to_string(l) + "\"}";
    for (const char* name : {"olmo2_train_layer_output_norm", "olmo2_train_attention_output_norm",
                             "olmo2_train_mlp_output_norm", "olmo2_train_layer_grad_norm"}) {
      ASSERT_TRUE(m.count(name + sel)) << what << ": " << name << sel;
      EXPECT_GT(m.at(name + sel), 0.0) << what << ": " << name << sel;
    }
    ASSERT_TRUE(m.count("olmo2_train_attention_logit_max" + sel));
    EXPECT_TRUE(std::isfinite(m.at("olmo2_train_attention_logit_max" + sel))) << what;
  }
}

void expect_promtool_clean(const std::string& body, const test::TempDir& dir) {
  if (std::system("command -v promtool > /dev/null") != 0) {
    ADD_FAILURE() << "promtool is not installed (scripts/setup.sh installs Debian's prometheus package)";
    return;
  }
  std::ofstream(dir.file("metrics.txt")) << body;
  EXPECT_EQ(std::system(("promtool check metrics < " + dir.file("metrics.txt") + " > " + dir.file("promtool.txt") +
                         " 2>&1").c_str()),
            0)
      << std::ifstream(dir.file("promtool.txt")).rdbuf();
}

TEST(TrainMetrics, OneProcessServesEveryMetric) {
  Tiny t;
  Background run(t.train(0, "--save-dir " + t.dir.file("ckpt") + " --save-interval 3 --keep 1 > " +
                                   t.dir.file("out.txt") + " 2> " + t.dir.file("err.txt")));
  const int port = port_from_file(t.port_file(), run);
  ASSERT_GT(port, 0) << std::ifstream(t.dir.file("err.txt")).rdbuf();
  const std::string first = scrape_until(port, 12);
  const std::string second = scrape_until(port, 13);
  EXPECT_EQ(test::read_file(t.port_file()), "127.0.0.1:" + std::to_string(port) + "\n");
  run.signal(SIGTERM);
  EXPECT_EQ(run.wait(), 75) << "stopped early with a checkpoint: " << std::ifstream(t.dir.file("err.txt")).rdbuf();
  // --metrics-port 0: the start line names the port the kernel chose; the port file
  // goes when the run does.
  EXPECT_THAT(test::read_file(t.dir.file("err.txt")), HasSubstr("metrics on http://127.0.0.1:" + std::to_string(port) +
                                                                "/metrics for 1 of 1 ranks"));
  EXPECT_FALSE(std::filesystem::exists(t.port_file())) << "the port file outlived the run";
  expect_training_metrics(second, 1, "one process");
  expect_promtool_clean(second, t.dir);
  const auto a = test::parse_metrics(first), b = test::parse_metrics(second);
  EXPECT_GE(b.at("olmo2_train_tokens_total"), a.at("olmo2_train_tokens_total"));
  EXPECT_GT(b.at("olmo2_train_checkpoint_save_seconds_count"), 0);
}

TEST(TrainMetrics, RankZeroServesEveryRanksValuesUnderMpirun) {
  Tiny t;
  Background run(std::string(OLMO2_MPIEXEC) + " -np 4 --oversubscribe --allow-run-as-root " +
                 t.train(0, "--tp 2 --pp 2 > " + t.dir.file("out.txt") + " 2> " + t.dir.file("err.txt")));
  const int port = port_from_file(t.port_file(), run);
  ASSERT_GT(port, 0) << std::ifstream(t.dir.file("err.txt")).rdbuf();
  const std::string body = scrape_until(port, 12);
  run.signal(SIGUSR1);  // mpirun forwards it: every rank stops after the same step
  EXPECT_EQ(run.wait(), 1) << "a stop without --save-dir is a failure: " << std::ifstream(t.dir.file("err.txt")).rdbuf();
  expect_training_metrics(body, 4, "tp 2 x pp 2");
  expect_promtool_clean(body, t.dir);
  EXPECT_THAT(body, HasSubstr("olmo2_train_step_seconds_count{dp=\"0\",pp=\"1\",rank=\"3\",tp=\"1\"}"));
  const auto m = test::parse_metrics(body);
  double bubble = 0, tp_wait = 0;
  for (const auto& [k, v] : m) {
    if (!k.starts_with("olmo2_train_step_phase_seconds{")) continue;
    if (k.find("phase=\"bubble\"") != std::string::npos) bubble += v;
    if (k.find("group=\"tp\"") != std::string::npos) tp_wait += v;
  }
  EXPECT_GT(bubble, 0) << "pp 2: the stages wait for each other";
  EXPECT_GT(tp_wait, 0) << "tp 2: every layer all-reduces";
}

// --metrics-per-node: each node's first rank serves its node's ranks; on this one
// machine that is local rank 0, serving all four.
TEST(TrainMetrics, OneEndpointPerNode) {
  Tiny t;
  Background run(std::string(OLMO2_MPIEXEC) + " -np 4 --oversubscribe --allow-run-as-root " +
                 t.train(0, "--tp 2 --dp 2 --metrics-per-node > " + t.dir.file("out.txt") + " 2> " +
                                t.dir.file("err.txt")));
  const int port = port_from_file(t.port_file(), run);
  ASSERT_GT(port, 0) << std::ifstream(t.dir.file("err.txt")).rdbuf();
  const std::string body = scrape_until(port, 12);
  run.signal(SIGUSR1);
  EXPECT_EQ(run.wait(), 1) << "a stop without --save-dir is a failure: " << std::ifstream(t.dir.file("err.txt")).rdbuf();
  expect_training_metrics(body, 4, "per node, tp 2 x dp 2");
  std::ostringstream err;
  err << std::ifstream(t.dir.file("err.txt")).rdbuf();
  EXPECT_THAT(err.str(), HasSubstr("/metrics for 4 of 4 ranks"));
}

TEST(TrainMetrics, APortInUseIsRefusedAtStartOnEveryRank) {
  Tiny t;
  httplib::Server blocker;  // holds a port the kernel chose: in use for as long as the test runs
  const int port = blocker.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread th([&] { blocker.listen_after_bind(); });
  const std::string message = "--metrics-port " + std::to_string(port) + ": cannot serve metrics on 127.0.0.1:" +
                              std::to_string(port);
  const test::RunResult one = test::run_olmo2_with("", t.train(port, "", 2));
  EXPECT_EQ(one.status, 1);
  EXPECT_THAT(one.err, HasSubstr(message));
  EXPECT_THAT(one.err, ::testing::Not(HasSubstr("step 1")));
  const test::RunResult four = test::run_olmo2_with(
      std::string(OLMO2_MPIEXEC) + " -np 4 --oversubscribe --allow-run-as-root", t.train(port, "--tp 2 --pp 2", 2));
  EXPECT_NE(four.status, 0);
  EXPECT_THAT(four.err, HasSubstr("rank 0: " + message));
  blocker.stop();
  th.join();
}

}  // namespace
}  // namespace olmo2
