// What the ranks of a job compare (launcher/job_options.h): options in a canonical text,
// per-rank ones left out, files by their contents, and the first difference named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "launcher/job_options.h"
#include "launcher/options.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

std::vector<JobOption> options_of(const std::vector<std::string>& args) {
  std::vector<const char*> argv{"olmo2"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data()).job_options;
}

std::string value_of(const std::vector<JobOption>& o, const std::string& name) {
  for (const JobOption& j : o) {
    if (j.name == name) return j.value;
  }
  return "(absent)";
}

TEST(JobOptions, CanonicalValuesPerRankOptionsLeftOutFilesByContents) {
  test::TempDir dir;
  std::ofstream(dir.file("a.json")) << "{}";
  std::ofstream(dir.file("b.json")) << "{}";
  const std::vector<std::string> base = {"train", "--model-config", dir.file("a.json"), "--data", "x.npy", "y.npy",
                                         "--seq-len", "16", "--global-batch", "8", "--steps", "2", "--lr", "5e-2",
                                         "--threads", "2", "--metrics-port", "9400", "--port-file", dir.file("p")};
  const std::vector<JobOption> a = options_of(base);
  EXPECT_EQ(value_of(a, "lr"), "0.05") << "the shortest text of the double";
  EXPECT_EQ(value_of(a, "threads"), "(absent)") << "each rank's own";
  EXPECT_EQ(value_of(a, "port-file"), "(absent)");
  EXPECT_EQ(value_of(a, "metrics-port"), "given");
  EXPECT_EQ(value_of(a, "data"), "2 files");
  EXPECT_THAT(value_of(a, "model-config"), ::testing::StartsWith("2 bytes, xxh3 "));
  // Another path to the same contents: the same job.
  std::vector<std::string> moved = base;
  moved[2] = dir.file("b.json");
  moved[15] = "1";
  EXPECT_EQ(first_difference(a, options_of(moved), 1), "") << "threads and paths of equal files may differ";
  std::vector<std::string> other = base;
  other[13] = "1e-2";
  EXPECT_EQ(first_difference(a, options_of(other), 3), "rank 3 has --lr 0.01, rank 0 --lr 0.05");
  other.push_back("--seed");
  other.push_back("7");
  other[13] = "5e-2";
  EXPECT_EQ(first_difference(a, options_of(other), 1), "rank 1 has --seed 7, rank 0 no --seed");
  EXPECT_EQ(parse_job_options(serialize_job_options(a)), a) << "the text round-trips";
  const std::vector<JobOption> odd = {{"x", "two\nlines \\ here"}};
  EXPECT_EQ(parse_job_options(serialize_job_options(odd)), odd);
}

// --model: two checkpoints with the same folder name and config.json but other weights
// (another seed, a stale node-local copy) are two jobs; a copy at another path is one.
TEST(JobOptions, ModelFoldersDifferByTheirWeightsNotTheirPaths) {
  test::TempDir dir;
  auto make = [&](const std::string& parent, char fill, size_t changed_at) {
    const std::string folder = dir.file(parent) + "/step-00000002";
    std::filesystem::create_directories(folder);
    std::ofstream(folder + "/config.json") << R"({"hidden_size": 64})";
    std::string weights(3 << 20, 'w');  // 3 MiB: past the first MiB, between the samples
    weights[changed_at] = fill;
    std::ofstream(folder + "/model.safetensors", std::ios::binary) << weights;
    return folder;
  };
  const std::string a = make("a", 'w', 0), same = make("copy", 'w', 0);
  const std::string head = make("head", 'x', 100), sampled = make("sampled", 'x', (3u << 20) / 33 * 16 + 10);
  auto opts = [](const std::string& model) {
    return options_of({"generate", "--model", model, "--prompt-ids", "1,2", "--max-tokens", "2"});
  };
  EXPECT_THAT(value_of(opts(a), "model"), ::testing::HasSubstr("model.safetensors 3145728 bytes, sampled xxh3 "));
  EXPECT_EQ(first_difference(opts(a), opts(same), 1), "") << "a copy at another path is the same model";
  EXPECT_THAT(first_difference(opts(a), opts(head), 1), ::testing::StartsWith("rank 1 has --model folder step-00000002"));
  EXPECT_NE(first_difference(opts(a), opts(sampled), 1), "") << "a change inside the 16th sample";
  std::ofstream(same + "/training_state.json") << "{}";
  EXPECT_NE(first_difference(opts(a), opts(same), 1), "") << "training_state.json (every file's checksum) is compared";
}

}  // namespace
}  // namespace olmo2
