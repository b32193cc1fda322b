// Training checkpoints: HF layout (sharded and single-file), bit-identical reload and
// forward against the transformers reference, retention, crash safety, training state.
//
// OLMO2_CHECKPOINT_TEST_KEEP=DIR additionally saves the fixture checkpoint to DIR
// (kept; step 7 sharded at 32 KiB, step 3 one file) so that
// tests/golden/check_hf_checkpoint.py can load them with transformers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/train/checkpoint.h"
#include "runtime/model/model.h"
#include "runtime/model/parameters.h"
#include "runtime/io/file_checksum.h"
#include "runtime/io/safetensors.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

std::string fixture_dir() { return test::source_path("tests/golden/fixtures/gqa-f32"); }

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return json::parse(in);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool any_tmp_dir(const std::string& dir) {
  for (const std::string& n : entries(dir)) {
    if (n.rfind(".tmp-step-", 0) == 0) return true;
  }
  return false;
}

// The fixture model and its parameter list (views into the model's weights).
struct Loaded {
  Olmo2Model model;
  ModelWeights grads;
  std::vector<Parameter> params;

  explicit Loaded(const std::string& dir) : model(Olmo2Model::load(dir)) {
    grads = zeros_like_weights(model.weights());
    params = list_parameters(model.mutable_weights(), grads, model.config(), model.shard());
  }

  // list_parameters must give the order of transformers' Olmo2ForCausalLM.state_dict(),
  // which decides the shards: per layer q, k, v, o, q_norm, k_norm, gate, up, down, then
  // the two post-norms.
  CheckpointContents contents() const {
    CheckpointContents c;
    c.config = model.config();
    for (const Parameter& p : params) c.model_tensors.emplace_back(p.name, p.value->view());
    auto rank = [](const std::string& name) {
      const char* order[] = {"q_proj",
                             "k_proj",
                             "v_proj",
                             "o_proj",
                             "q_norm",
                             "k_norm",
                             "gate_proj",
                             "up_proj",
                             "down_proj",
                             "post_attention_layernorm",
                             "post_feedforward_layernorm"};
      for (int i = 0; i < 11; ++i) {
        if (name.find(std::string(".") + order[i] + ".") != std::string::npos) return i;
      }
      return -1;
    };
    auto layer = [](const std::string& name) {
      if (name.rfind("model.layers.", 0) != 0)
        return name == "model.embed_tokens.weight" ? -1 : 1 << 30;
      return std::stoi(name.substr(13));
    };
    for (size_t i = 1; i < c.model_tensors.size(); ++i) {
      const std::string &a = c.model_tensors[i - 1].first, &b = c.model_tensors[i].first;
      EXPECT_LE(std::make_pair(layer(a), rank(a)), std::make_pair(layer(b), rank(b)))
          << a << " before " << b << " is not the state-dict order";
    }
    c.state = {{"note", "fixture"}};
    return c;
  }
};

// Max |logits − reference| for both reference sequences, as tests/golden does it.
double max_logit_diff(const Olmo2Model& model) {
  const SafetensorsFile ref(fixture_dir() + "/reference.safetensors");
  double worst = 0;
  for (int b = 0; b < 2; ++b) {
    const TensorInfo& ids_info = ref.tensors().at("ids." + std::to_string(b));
    std::vector<int32_t> ids(static_cast<size_t>(ids_info.shape[0]));
    std::memcpy(ids.data(), ref.data(ids_info), ids.size() * 4);
    const ForwardResult out = model.forward({ids});
    const TensorInfo& info = ref.tensors().at("logits." + std::to_string(b));
    EXPECT_EQ(info.shape, out.logits[0].shape());
    const auto* r = reinterpret_cast<const float*>(ref.data(info));
    for (int64_t i = 0; i < out.logits[0].numel(); ++i) {
      float rv;
      std::memcpy(&rv, r + i, 4);
      worst = std::max(worst, static_cast<double>(::olmo2::test::abs_diff(out.logits[0].f32()[i], rv)));
    }
  }
  return worst;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void TearDown() override { set_checkpoint_fault_for_testing(-1); }
  test::TempDir tmp;
};

TEST(CheckpointName, EightDigits) {
  EXPECT_EQ(checkpoint_dir_name(0), "step-00000000");
  EXPECT_EQ(checkpoint_dir_name(1234), "step-00001234");
  EXPECT_EQ(checkpoint_dir_name(99999999), "step-99999999");
}

TEST_F(CheckpointTest, ShardedSaveReloadsBitIdenticalWithReferenceLogits) {
  const Loaded src(fixture_dir());
  const CheckpointContents contents = src.contents();
  // 32 KiB: one [128, 64] MLP matrix per shard at most, several norms beside it.
  const int64_t max_shard = 128 * 64 * 4;
  const std::string dir = save_checkpoint(tmp.file("ckpt"), 7, contents, 0, max_shard);
  EXPECT_EQ(dir, tmp.file("ckpt") + "/step-00000007");
  if (const char* keep = std::getenv("OLMO2_CHECKPOINT_TEST_KEEP")) {
    std::printf("kept checkpoint: %s\n", save_checkpoint(keep, 7, contents, 0, max_shard).c_str());
  }
  EXPECT_FALSE(any_tmp_dir(tmp.file("ckpt")));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));

  // The index: every tensor, total_size = the tensor bytes, shards named k-of-N.
  const json index = read_json(dir + "/model.safetensors.index.json");
  const json& map = index.at("weight_map");
  ASSERT_EQ(map.size(), contents.model_tensors.size());
  uint64_t total = 0;
  int64_t params = 0;
  std::set<std::string> files;
  for (const auto& [name, view] : contents.model_tensors) {
    ASSERT_TRUE(map.contains(name)) << name;
    files.insert(map.at(name).get<std::string>());
    total += view.bytes();
    params += view.numel();
  }
  EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);
  EXPECT_EQ(index.at("metadata").at("total_parameters").get<int64_t>(), params);
  ASSERT_GT(files.size(), 5u);
  size_t k = 0;
  for (const std::string& f : files) {
    char expected[64];
    std::snprintf(expected, sizeof expected, "model-%05zu-of-%05zu.safetensors", ++k, files.size());
    EXPECT_EQ(f, expected);
    EXPECT_TRUE(fs::exists(dir + "/" + f)) << f;
  }
  // Shards as huggingface_hub's split_state_dict_into_shards_factory cuts them (what
  // save_pretrained uses): state-dict order, a new shard when the next tensor would
  // not fit, a tensor over the limit alone in a shard appended at once (so lm_head,
  // 48 KiB, comes before the shard with model.norm).
  std::vector<std::vector<std::string>> expected;
  std::vector<std::string> current;
  uint64_t current_bytes = 0;
  for (const auto& [name, view] : contents.model_tensors) {
    if (view.bytes() > static_cast<uint64_t>(max_shard)) {
      expected.push_back({name});
      continue;
    }
    if (current_bytes + view.bytes() > static_cast<uint64_t>(max_shard)) {
      expected.push_back(current);
      current.clear();
      current_bytes = 0;
    }
    current.push_back(name);
    current_bytes += view.bytes();
  }
  expected.push_back(current);
  ASSERT_EQ(expected.size(), files.size());
  for (size_t s = 0; s < expected.size(); ++s) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", s + 1, expected.size());
    for (const std::string& name : expected[s]) EXPECT_EQ(map.at(name), file) << name;
    EXPECT_EQ(SafetensorsFile(dir + "/" + file).tensors().size(), expected[s].size()) << file;
  }
  EXPECT_EQ(map.at("lm_head.weight"), "model-00017-of-00018.safetensors");

  // config.json reads back as the same model, float32; generation config has the ids.
  const json cfg = read_json(dir + "/config.json");
  EXPECT_EQ(cfg.at("architectures"), json::array({"Olmo2ForCausalLM"}));
  EXPECT_EQ(cfg.at("model_type"), "olmo2");
  EXPECT_EQ(cfg.at("torch_dtype"), "float32");
  const json gen = read_json(dir + "/generation_config.json");
  EXPECT_EQ(gen.at("eos_token_id"), 190);
  EXPECT_EQ(gen.at("pad_token_id"), 191);
  EXPECT_FALSE(gen.contains("bos_token_id"));

  // Every weight bit-identical, and the forward still matches transformers.
  Loaded back(dir);
  EXPECT_EQ(back.model.config().to_json(), src.model.config().to_json());
  ASSERT_EQ(back.params.size(), src.params.size());
  for (size_t i = 0; i < src.params.size(); ++i) {
    const Parameter& a = src.params[i];
    const Parameter& b = back.params[i];
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(a.value->shape(), b.value->shape()) << a.name;
    EXPECT_EQ(std::memcmp(a.value->f32(), b.value->f32(), a.value->view().bytes()), 0) << a.name;
  }
  EXPECT_LE(max_logit_diff(back.model), 1e-4);
}

TEST_F(CheckpointTest, SingleShardIsModelSafetensors) {
  const Loaded src(fixture_dir());
  const std::string dir = save_checkpoint(tmp.path(), 3, src.contents(), 0);
  if (const char* keep = std::getenv("OLMO2_CHECKPOINT_TEST_KEEP")) {
    std::printf("kept checkpoint: %s\n", save_checkpoint(keep, 3, src.contents(), 0).c_str());
  }
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  for (const std::string& n : entries(dir)) EXPECT_THAT(n, ::testing::Not(HasSubstr("-of-")));
  EXPECT_EQ(entries(dir),
            (std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors",
                                      "training_state.json", "training_state.safetensors"}));
  const Loaded back(dir);
  EXPECT_LE(max_logit_diff(back.model), 1e-4);
}

TEST_F(CheckpointTest, ABf16ModelIsSavedInBf16AndLoadsBackAsIs) {
  Olmo2Model bf16 = Olmo2Model::load(fixture_dir(), ShardSpec::whole(ModelConfig::load(fixture_dir())),
                                     Precision::BF16);
  CheckpointContents c;
  c.config = bf16.config();
  c.model_tensors = hf_named_tensors(bf16.mutable_weights(), bf16.config());
  const std::string dir = save_checkpoint(tmp.path(), 1, c, 0);
  const ModelConfig saved = ModelConfig::load(dir);
  EXPECT_EQ(saved.dtype, DType::BF16);
  const Olmo2Model back = Olmo2Model::load(dir);  // the checkpoint's precision: bf16
  EXPECT_EQ(back.precision(), Precision::BF16);
  const auto& a = back.weights().layers[0].gate_proj;
  const auto& b = bf16.weights().layers[0].gate_proj;
  ASSERT_EQ(a.dtype(), DType::BF16);
  EXPECT_EQ(std::memcmp(a.view().data(), b.view().data(), static_cast<size_t>(a.numel()) * 2), 0);
}

TEST_F(CheckpointTest, KeepsNewestAndNothingElseIsTouched) {
  const Loaded src(fixture_dir());
  write_file(tmp.file("notes.txt"), "mine");
  fs::create_directory(tmp.file("step-123"));
  fs::create_directory(tmp.file("step-best"));
  fs::create_directory(tmp.file("other"));
  write_file(tmp.file("step-00000001.txt"), "not a checkpoint dir");
  for (int64_t step : {10, 20, 30, 40}) save_checkpoint(tmp.path(), step, src.contents(), 2);
  EXPECT_EQ(entries(tmp.path()),
            (std::vector<std::string>{"notes.txt", "other", "step-00000001.txt", "step-00000030",
                                      "step-00000040", "step-123", "step-best"}));
  EXPECT_EQ(slurp(tmp.file("notes.txt")), "mine");
  EXPECT_EQ(latest_checkpoint(tmp.path()), tmp.file("step-00000040"));
  // keep <= 0 keeps all.
  save_checkpoint(tmp.path(), 50, src.contents(), 0);
  EXPECT_TRUE(fs::exists(tmp.file("step-00000030")));
  // The checkpoint just written survives even when newer ones exist.
  save_checkpoint(tmp.path(), 5, src.contents(), 1);
  EXPECT_TRUE(fs::exists(tmp.file("step-00000005")));
  EXPECT_TRUE(fs::exists(tmp.file("step-00000050")));
  EXPECT_FALSE(fs::exists(tmp.file("step-00000040")));
}

TEST_F(CheckpointTest, LatestIgnoresIncompleteDirectories) {
  EXPECT_EQ(latest_checkpoint(tmp.file("missing")), "");
  EXPECT_EQ(latest_checkpoint(tmp.path()), "");
  const Loaded src(fixture_dir());
  save_checkpoint(tmp.path(), 5, src.contents(), 0);
  fs::create_directory(tmp.file("step-00000009"));  // no training_state.json
  write_file(tmp.file("step-00000009/config.json"), "{}");
  fs::create_directory(tmp.file("step-000000100"));  // 9 digits: not ours
  write_file(tmp.file("step-000000100/training_state.json"), "{}");
  write_file(tmp.file("step-00000011"), "a file, not a directory");
  EXPECT_EQ(latest_checkpoint(tmp.path()), tmp.file("step-00000005"));
}

TEST_F(CheckpointTest, CrashLeavesPreviousCheckpointIntact) {
  const Loaded src(fixture_dir());
  CheckpointContents c = src.contents();
  c.state = {{"step", 1}};
  save_checkpoint(tmp.path(), 1, c, 2, 128 * 64 * 4);
  const json index = read_json(tmp.file("step-00000001/model.safetensors.index.json"));
  std::set<std::string> shards;
  for (const auto& [name, file] : index.at("weight_map").items())
    shards.insert(file.get<std::string>());
  const std::string first_shard = tmp.file("step-00000001/" + *shards.begin());
  const std::string old_model = slurp(first_shard);
  ASSERT_FALSE(old_model.empty());
  // config, generation config, shards, index, training_state.{safetensors,json}.
  const int files = static_cast<int>(shards.size()) + 5;
  // A crash after every possible number of files (n = files: all written, not renamed).
  for (int n = 0; n <= files; ++n) {
    set_checkpoint_fault_for_testing(n);
    c.state = {{"step", 2}};
    EXPECT_THROW(save_checkpoint(tmp.path(), 2, c, 1, 128 * 64 * 4), Error) << n;
    EXPECT_FALSE(fs::exists(tmp.file("step-00000002"))) << n;
    EXPECT_TRUE(any_tmp_dir(tmp.path())) << "a crash leaves its temporary directory, n=" << n;
    EXPECT_EQ(latest_checkpoint(tmp.path()), tmp.file("step-00000001"));
    EXPECT_EQ(load_training_state(tmp.file("step-00000001")).state.at("step"), 1);
    EXPECT_EQ(slurp(first_shard), old_model);
  }
  // A fault point past the last file is never reached.
  set_checkpoint_fault_for_testing(files + 1);
  save_checkpoint(tmp.path(), 2, c, 0, 128 * 64 * 4);
  EXPECT_FALSE(any_tmp_dir(tmp.path()));
  fs::remove_all(tmp.file("step-00000002"));
  set_checkpoint_fault_for_testing(files - 1);
  EXPECT_THROW(save_checkpoint(tmp.path(), 2, c, 1, 128 * 64 * 4), Error);
  set_checkpoint_fault_for_testing(-1);
  // The next save removes what the crash left and completes.
  c.state = {{"step", 3}};
  save_checkpoint(tmp.path(), 3, c, 2, 128 * 64 * 4);
  EXPECT_FALSE(any_tmp_dir(tmp.path()));
  EXPECT_EQ(entries(tmp.path()), (std::vector<std::string>{"step-00000001", "step-00000003"}));
  EXPECT_EQ(load_training_state(latest_checkpoint(tmp.path())).state.at("step"), 3);
}

TEST_F(CheckpointTest, ResavingAStepReplacesIt) {
  const Loaded src(fixture_dir());
  CheckpointContents c = src.contents();
  c.state = {{"v", 1}};
  save_checkpoint(tmp.path(), 7, c, 0, 128 * 64 * 4);  // sharded
  c.state = {{"v", 2}};
  const std::string dir = save_checkpoint(tmp.path(), 7, c, 0);  // one file
  EXPECT_EQ(load_training_state(dir).state.at("v"), 2);
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"step-00000007"});
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  EXPECT_LE(max_logit_diff(Olmo2Model::load(dir)), 1e-4);
}

TEST_F(CheckpointTest, InterruptedResaveIsRestored) {
  // A crash between moving the old version of a step aside and moving the new one in
  // leaves `.tmp-step-<step>-<pid>-old`; the next save puts it back.
  const Loaded src(fixture_dir());
  const std::string dir = save_checkpoint(tmp.path(), 4, src.contents(), 0);
  fs::rename(dir, tmp.file(".tmp-step-00000004-99999-old"));
  fs::create_directory(tmp.file(".tmp-step-00000004-99999"));
  save_checkpoint(tmp.path(), 6, src.contents(), 0);
  EXPECT_EQ(entries(tmp.path()), (std::vector<std::string>{"step-00000004", "step-00000006"}));
  EXPECT_EQ(load_training_state(dir).state.at("note"), "fixture");
}

TEST_F(CheckpointTest, UnwritableDirectoryThrowsNamingThePath) {
  const Loaded src(fixture_dir());
  write_file(tmp.file("plain"), "x");
  const std::string bad = tmp.file("plain/ckpt");
  const std::string msg = test::input_error([&] { save_checkpoint(bad, 1, src.contents(), 0); });
  EXPECT_THAT(msg, HasSubstr(bad));
  EXPECT_THAT(msg, HasSubstr("Not a directory"));

  if (::geteuid() != 0) {  // root ignores directory permissions
    fs::create_directory(tmp.file("ro"));
    save_checkpoint(tmp.file("ro"), 1, src.contents(), 0);
    fs::permissions(tmp.file("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    try {
      save_checkpoint(tmp.file("ro"), 2, src.contents(), 0);
      ADD_FAILURE() << "expected an Error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(tmp.file("ro")));
      EXPECT_THAT(e.what(), HasSubstr("Permission denied"));
    }
    fs::permissions(tmp.file("ro"), fs::perms::owner_all);
    EXPECT_EQ(latest_checkpoint(tmp.file("ro")), tmp.file("ro/step-00000001"));
  }
}

TEST_F(CheckpointTest, InvalidContentsThrowBeforeWriting) {
  const Loaded src(fixture_dir());
  const std::string dir = tmp.file("ckpt");
  {
    CheckpointContents c = src.contents();
    std::vector<uint16_t> bf16(64);
    c.model_tensors.back().second = TensorView(bf16.data(), DType::BF16, {64});
    EXPECT_THAT(test::input_error([&] { save_checkpoint(dir, 1, c, 0); }),
                HasSubstr(c.model_tensors.back().first + " is bf16"));
  }
  {
    CheckpointContents c = src.contents();
    const TensorView& w = c.model_tensors[0].second;  // [192, 64]
    c.model_tensors[0].second = TensorView(w.data(), DType::F32, {64, 192}, {1, 64}, Device::CPU);
    EXPECT_THAT(test::input_error([&] { save_checkpoint(dir, 1, c, 0); }), HasSubstr("contiguous"));
  }
  {
    CheckpointContents c = src.contents();
    c.model_tensors.push_back(c.model_tensors[0]);
    EXPECT_THAT(test::input_error([&] { save_checkpoint(dir, 1, c, 0); }), HasSubstr("twice"));
  }
  {
    CheckpointContents c = src.contents();
    c.tokenizer_file = tmp.file("no-such-tokenizer.json");
    EXPECT_THAT(test::input_error([&] { save_checkpoint(dir, 1, c, 0); }),
                HasSubstr(c.tokenizer_file));
  }
  EXPECT_THAT(test::input_error([&] { save_checkpoint(dir, -1, src.contents(), 0); }),
              HasSubstr("step -1"));
  EXPECT_THAT(test::input_error([&] { save_checkpoint(dir, 100000000, src.contents(), 0); }),
              HasSubstr("100000000"));
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(CheckpointTest, TrainingStateAndTokenizerRoundTrip) {
  const Loaded src(fixture_dir());
  CheckpointContents c = src.contents();
  c.state = {{"step", 12},
             {"scheduler", {{"lr", 3e-4}, {"warmup", 100}}},
             {"data", {{"cursor", 4096}}},
             {"rng", "0123456789abcdef"},
             {"spikes", {1.5, 2.25, 3.0}}};
  Tensor m = Tensor::zeros({3, 4});
  for (int i = 0; i < 12; ++i) m.f32()[i] = 0.1f * static_cast<float>(i) - 0.3f;
  std::vector<uint16_t> half = {0x3f80, 0x4000, 0xbf80};
  c.state_tensors.emplace("adam.m.model.norm.weight", m.view());
  c.state_tensors.emplace("aux.bf16", TensorView(half.data(), DType::BF16, {3}));
  write_file(tmp.file("tok.json"), "{\"model\": {\"type\": \"BPE\"}}\n");
  c.tokenizer_file = tmp.file("tok.json");
  const std::string dir = save_checkpoint(tmp.file("ckpt"), 12, c, 0);

  EXPECT_EQ(slurp(dir + "/tokenizer.json"), slurp(tmp.file("tok.json")));
  EXPECT_FALSE(fs::exists(dir + "/tokenizer_config.json"));  // none beside the source
  // With a tokenizer_config.json beside the tokenizer (its EOS, padding and chat
  // template), the checkpoint holds it too, listed with its checksum.
  write_file(tmp.file("tokenizer_config.json"), "{\"eos_token\": \"<|endoftext|>\"}\n");
  const std::string with = save_checkpoint(tmp.file("ckpt2"), 12, c, 0);
  EXPECT_EQ(slurp(with + "/tokenizer_config.json"), slurp(tmp.file("tokenizer_config.json")));
  EXPECT_TRUE(read_json(with + "/training_state.json").at("files").contains("tokenizer_config.json"));
  const TrainingState ts = load_training_state(dir);
  EXPECT_EQ(ts.dir, dir);
  EXPECT_EQ(ts.step, 12);
  EXPECT_EQ(ts.state, c.state);
  EXPECT_EQ(read_json(dir + "/training_state.json").at("format_version"),
            kTrainingStateFormatVersion);
  ASSERT_TRUE(ts.has("adam.m.model.norm.weight"));
  const Tensor back = ts.load_f32("adam.m.model.norm.weight", {3, 4});
  EXPECT_EQ(std::memcmp(back.f32(), m.f32(), 48), 0);
  const TensorInfo& info = ts.tensors->tensors().at("aux.bf16");
  EXPECT_EQ(info.dtype_tag, "BF16");
  EXPECT_EQ(std::memcmp(ts.tensors->data(info), half.data(), 6), 0);
  EXPECT_THAT(test::input_error([&] {
                ts.load_f32("adam.m.model.norm.weight", {4, 3});
              }),
              HasSubstr("expected [4, 3]"));
  EXPECT_THAT(test::input_error([&] { ts.load_f32("aux.bf16", {3}); }), HasSubstr("BF16"));
  EXPECT_THAT(test::input_error([&] { ts.load_f32("nope", {1}); }), HasSubstr("nope"));

  // An empty state and no state tensors round-trip too.
  CheckpointContents bare = src.contents();
  bare.state = json::object();
  const TrainingState ts2 = load_training_state(save_checkpoint(tmp.file("bare"), 0, bare, 0));
  EXPECT_EQ(ts2.state, json::object());
  EXPECT_TRUE(ts2.tensors->tensors().empty());
}

TEST_F(CheckpointTest, LoadTrainingStateErrorsNameTheFile) {
  const std::string dir = tmp.path();
  EXPECT_THAT(test::input_error([&] { load_training_state(dir); }),
              HasSubstr(dir + "/training_state.json"));
  write_file(tmp.file("training_state.json"), "{\"format_version\": 1, \"step\": ");
  EXPECT_THAT(
      test::input_error([&] { load_training_state(dir); }),
      ::testing::AllOf(HasSubstr(tmp.file("training_state.json")), HasSubstr("not valid JSON")));
  write_file(tmp.file("training_state.json"),
             "{\"format_version\": 9, \"step\": 1, \"state\": {}}");
  EXPECT_THAT(test::input_error([&] { load_training_state(dir); }), HasSubstr("format_version 9"));
  write_file(tmp.file("training_state.json"), "{\"format_version\": 1, \"state\": {}}");
  EXPECT_THAT(test::input_error([&] { load_training_state(dir); }), HasSubstr("step"));
  write_file(tmp.file("training_state.json"),
             "{\"format_version\": 1, \"step\": 1, \"state\": {}}");
  EXPECT_THAT(test::input_error([&] { load_training_state(dir); }),
              HasSubstr("training_state.safetensors"));
  write_file(tmp.file("training_state.safetensors"), "garbage");
  EXPECT_THAT(test::input_error([&] { load_training_state(dir); }),
              HasSubstr("training_state.safetensors"));
}

}  // namespace
}  // namespace olmo2

namespace olmo2 {
namespace {

// training_state.json lists every other file of the checkpoint with its size and the
// XXH3-128 that checksum_file computes by reading it back (hashed while written).
TEST_F(CheckpointTest, TrainingStateListsAChecksumOfEveryOtherFile) {
  const Loaded src(fixture_dir());
  CheckpointContents c = src.contents();
  write_file(tmp.file("tok.json"), "{\"model\": {\"type\": \"BPE\"}}\n");
  c.tokenizer_file = tmp.file("tok.json");
  const std::string dir = save_checkpoint(tmp.file("ckpt"), 7, c, 0, 32 << 10);
  const json files = read_json(dir + "/training_state.json").at("files");
  std::vector<std::string> listed;
  for (const auto& [name, entry] : files.items()) listed.push_back(name);
  std::vector<std::string> on_disk = entries(dir);
  on_disk.erase(std::find(on_disk.begin(), on_disk.end(), "training_state.json"));
  EXPECT_EQ(listed, on_disk);  // both sorted
  EXPECT_GT(listed.size(), 6u);  // sharded: several model-0000k-of-0000N files
  for (const auto& [name, entry] : files.items()) {
    const FileChecksum sum = checksum_file(dir + "/" + name);
    EXPECT_EQ(entry.at("bytes").get<uint64_t>(), sum.bytes) << name;
    EXPECT_EQ(entry.at("xxh3_128").get<std::string>(), sum.xxh3_128) << name;
    EXPECT_EQ(sum.xxh3_128.size(), 32u);
  }
}

}  // namespace
}  // namespace olmo2
