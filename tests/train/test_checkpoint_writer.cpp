// The streaming checkpoint writer (docs/architecture.md §7 "Checkpoint writing at
// scale"): its order (shard by shard, names sorted within a file, then the state), the
// bytes it writes against save_checkpoint's for the same tensors, and its refusals — a
// tensor out of order or of another shape, finishing early — after which nothing of the
// checkpoint is left on disk.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "runtime/io/file_checksum.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/checkpoint_writer.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab_size = 8, c.hidden_size = 4, c.intermediate_size = 8, c.num_hidden_layers = 1;
  c.num_attention_heads = 2, c.num_key_value_heads = 2, c.eos_token_ids = {7};
  return c;
}

// Four model tensors (64, 16, 48 and 16 bytes, in that state-dict order) and two state
// tensors, with distinct values.
struct Fixture {
  std::map<std::string, Tensor> tensors;
  CheckpointContents contents;
  Fixture() {
    const std::vector<std::pair<std::string, std::vector<int64_t>>> model = {
        {"z.weight", {4, 4}}, {"b.weight", {4}}, {"a.weight", {3, 4}}, {"c.weight", {4}}};
    float v = 0.5f;
    auto make = [&](const std::string& name, const std::vector<int64_t>& shape) -> TensorView {
      Tensor t = Tensor::zeros(shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = v, v += 0.25f;
      return tensors.emplace(name, std::move(t)).first->second.view();
    };
    contents.config = tiny_config();
    for (const auto& [name, shape] : model) contents.model_tensors.emplace_back(name, make(name, shape));
    contents.state_tensors.emplace("exp_avg_sq.b", make("exp_avg_sq.b", {4}));
    contents.state_tensors.emplace("exp_avg.b", make("exp_avg.b", {4}));
    contents.state = {{"note", "writer"}};
  }
  CheckpointPlan plan() const {
    CheckpointPlan p{contents.config, {}, {}, contents.state, ""};
    for (const auto& [name, view] : contents.model_tensors) p.model_tensors.push_back({name, view.dtype(), view.shape()});
    for (const auto& [name, view] : contents.state_tensors) p.state_tensors.push_back({name, view.dtype(), view.shape()});
    return p;
  }
};

TEST(CheckpointWriter, OrderIsShardByShardNamesSortedThenTheState) {
  test::TempDir tmp;
  const Fixture f;
  // 80-byte shards: {z 64, b 16}, {a 48, c 16}.
  CheckpointWriter w(tmp.file("s"), 1, f.plan(), 0, 80);
  EXPECT_THAT(w.order(), ElementsAre("b.weight", "z.weight", "a.weight", "c.weight", "exp_avg.b", "exp_avg_sq.b"));
  EXPECT_EQ(w.next(), "b.weight");
}

TEST(CheckpointWriter, StreamedFilesEqualSaveCheckpointsByteForByte) {
  test::TempDir tmp;
  const Fixture f;
  const std::string whole = save_checkpoint(tmp.file("whole"), 3, f.contents, 0, 80);
  CheckpointWriter w(tmp.file("streamed"), 3, f.plan(), 0, 80);
  for (const std::string& name : w.order()) w.write(name, f.tensors.at(name).view());
  const std::string streamed = w.finish();
  EXPECT_EQ(streamed, tmp.file("streamed") + "/step-00000003");
  ASSERT_EQ(entries(whole), entries(streamed));
  EXPECT_THAT(entries(streamed), ::testing::Contains("model-00002-of-00002.safetensors"));
  for (const std::string& file : entries(whole)) {
    EXPECT_EQ(slurp(whole + "/" + file), slurp(streamed + "/" + file)) << file;
  }
  // The data landed where the header says, and the checksum is the file's.
  const SafetensorsFile shard(streamed + "/model-00002-of-00002.safetensors");
  const TensorInfo& a = shard.tensors().at("a.weight");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(std::memcmp(shard.data(a), f.tensors.at("a.weight").view().data(), 48), 0);
  const nlohmann::json state = nlohmann::json::parse(slurp(streamed + "/training_state.json"));
  const std::string shard_bytes = slurp(streamed + "/model-00002-of-00002.safetensors");
  Xxh3Stream h;
  h.update(shard_bytes.data(), shard_bytes.size());
  EXPECT_EQ(state["files"]["model-00002-of-00002.safetensors"][kChecksumAlgorithm], h.hex());
}

TEST(CheckpointWriter, ATensorOutOfOrderOrOfAnotherShapeIsRefusedAndNothingStays) {
  test::TempDir tmp;
  const Fixture f;
  const std::string dir = tmp.file("s");
  {
    CheckpointWriter w(dir, 2, f.plan(), 0, 80);
    EXPECT_THAT(test::input_error([&] { w.write("z.weight", f.tensors.at("z.weight").view()); }),
                AllOf(HasSubstr("z.weight arrived out of order"), HasSubstr("expected b.weight")));
    const Tensor wrong = Tensor::zeros({2, 2});
    EXPECT_THAT(test::input_error([&] { w.write("b.weight", wrong.view()); }),
                AllOf(HasSubstr("b.weight is f32 [2, 2]"), HasSubstr("planned as f32 [4]")));
    w.write("b.weight", f.tensors.at("b.weight").view());
    EXPECT_THROW(w.finish(), Error);  // three model tensors and the state never came
    try {
      w.finish();
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("tensor z.weight (and 4 after it) never written"));
    }
    EXPECT_EQ(entries(dir).size(), 1u);  // the temporary directory, while the writer lives
  }
  EXPECT_TRUE(entries(dir).empty()) << "an unfinished writer removes its temporary directory";
}

TEST(CheckpointWriter, APlanItCannotWriteIsRefusedBeforeTheDiskIsTouched) {
  test::TempDir tmp;
  const Fixture f;
  CheckpointPlan twice = f.plan();
  twice.model_tensors.push_back(twice.model_tensors.front());
  EXPECT_THAT(test::input_error([&] { CheckpointWriter(tmp.file("s"), 1, twice, 0); }), HasSubstr("listed twice"));
  CheckpointPlan mixed = f.plan();
  mixed.model_tensors.back().dtype = DType::BF16;
  EXPECT_THAT(test::input_error([&] { CheckpointWriter(tmp.file("s"), 1, mixed, 0); }), HasSubstr("c.weight is bf16"));
  EXPECT_THAT(test::input_error([&] { CheckpointWriter(tmp.file("s"), -2, f.plan(), 0); }), HasSubstr("step -2"));
  EXPECT_FALSE(fs::exists(tmp.file("s")));
}

}  // namespace
}  // namespace olmo2
