// Checkpoints that can be trusted (docs/architecture.md §7 "Checkpoint integrity"): every
// corruption seen in practice is refused naming the file, before any weight is used, and
// --resume-fallback continues from the newest checkpoint that passes, exactly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "runtime/io/checkpoint_files.h"
#include "runtime/train/checkpoint.h"
#include "runtime/io/file_checksum.h"
#include "runtime/train/checkpoint_verify.h"
#include "runtime/train/trainer.h"
#include "tests/launcher/tiny_model.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

json read_json(const std::string& path) { return json::parse(std::ifstream(path)); }
void write_json(const std::string& path, const json& j) { std::ofstream(path) << j.dump(2); }

/// Overwrites bytes at `offset` of `path` in place.
void poke(const std::string& path, uint64_t offset, const void* bytes, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
}

/// Byte offset in a safetensors file of element `k` (f32) of tensor `name`.
uint64_t element_offset(const std::string& path, const std::string& name, uint64_t k) {
  std::ifstream in(path, std::ios::binary);
  uint64_t header = 0;
  in.read(reinterpret_cast<char*>(&header), 8);
  std::string text(header, ' ');
  in.read(text.data(), static_cast<std::streamsize>(header));
  return 8 + header + json::parse(text).at(name).at("data_offsets")[0].get<uint64_t>() + 4 * k;
}

/// Makes training_state.json's checksum of `file` match the file again (a corruption
/// that happened before the checksum was taken, e.g. in memory).
void rehash(const std::string& dir, const std::string& file) {
  json j = read_json(dir + "/training_state.json");
  const FileChecksum c = checksum_file(dir + "/" + file);
  j["files"][file] = {{"bytes", c.bytes}, {"xxh3_128", c.xxh3_128}};
  write_json(dir + "/training_state.json", j);
}

struct TinyRun : test::TinyModel {
  std::string save = dir.file("run");
  TrainOptions options(int64_t steps) const {
    TrainOptions o;
    o.model_config = dir.file("config.json");
    o.data = {dir.file("tokens.npy")};
    o.seq_len = 16, o.global_batch = 4, o.micro_batch = 2, o.steps = steps, o.lr = 1e-2, o.warmup_steps = 1;
    o.save_dir = save;
    o.keep = 0;
    return o;
  }
  /// Trains `t` to step `until` (default its --steps), saving every 2 steps; returns the losses.
  static std::vector<double> train(Trainer& t, int64_t until = 0) {
    std::vector<double> losses;
    while (t.steps_done() < (until ? until : t.options().steps)) {
      losses.push_back(t.step().loss);
      if (t.steps_done() % 2 == 0) t.save();
    }
    return losses;
  }
  /// Checkpoints at steps 2 and 4 of a 6-step run (its schedule) in a new `save`, as if
  /// stopped there; returns the losses of steps 1–4.
  std::vector<double> make_checkpoints() {
    fs::remove_all(save);
    Trainer t(options(6));
    return train(t, 4);
  }
  std::string step_dir(int s) const { return save + "/" + checkpoint_dir_name(s); }
  std::string verify_error(int s) const {
    return test::input_error([&] { verify_checkpoint(step_dir(s), {}, nullptr); });
  }
  std::string resume_error(bool fallback = false) const {
    TrainOptions o = options(6);
    o.resume = "auto", o.resume_fallback = fallback;
    return test::input_error([&] { Trainer t(o); });
  }
};

TEST(CheckpointVerify, IntactCheckpointsPassAndAreTheOnesResumed) {
  TinyRun r;
  r.make_checkpoints();
  EXPECT_NO_THROW(verify_checkpoint(r.step_dir(2), {}, nullptr));
  EXPECT_NO_THROW(verify_checkpoint(r.step_dir(4), {}, nullptr));
  // Every share of the work passes too (how the ranks of a job split it).
  for (int rank = 0; rank < 3; ++rank) EXPECT_NO_THROW(verify_checkpoint(r.step_dir(4), {rank, 3}, nullptr));
}

// The probe that started this: 64 bytes of NaN in the AdamW moments resumed with rc 0 and
// spread NaN at the next step.
TEST(CheckpointVerify, NanBytesInTheMomentsAreCaughtByTheChecksumThenByTheScan) {
  TinyRun r;
  r.make_checkpoints();
  const std::string file = r.step_dir(4) + "/training_state.safetensors";
  const std::vector<float> nan(16, std::numeric_limits<float>::quiet_NaN());
  poke(file, element_offset(file, "exp_avg_sq.lm_head.weight", 5), nan.data(), 64);
  EXPECT_THAT(r.verify_error(4), HasSubstr("training_state.safetensors: expected "));
  rehash(r.step_dir(4), "training_state.safetensors");
  EXPECT_THAT(r.verify_error(4), HasSubstr("checkpoint " + r.step_dir(4) +
                                           ": training_state.safetensors: tensor exp_avg_sq.lm_head.weight has a "
                                           "non-finite value (nan) at flat index 5 of shape [97, 32]"));
  EXPECT_THAT(r.resume_error(), HasSubstr("exp_avg_sq.lm_head.weight"));
}

// exp_avg_sq is a running mean of squares: a negative value (finite, with a checksum to
// match) would make the next update's sqrt NaN. exp_avg may be negative.
TEST(CheckpointVerify, ANegativeSecondMomentIsRefused) {
  TinyRun r;
  r.make_checkpoints();
  const std::string file = r.step_dir(4) + "/training_state.safetensors";
  const float minus_one = -1.0f;
  poke(file, element_offset(file, "exp_avg.lm_head.weight", 3), &minus_one, 4);
  rehash(r.step_dir(4), "training_state.safetensors");
  EXPECT_NO_THROW(verify_checkpoint(r.step_dir(4), {}, nullptr));
  poke(file, element_offset(file, "exp_avg_sq.lm_head.weight", 9), &minus_one, 4);
  rehash(r.step_dir(4), "training_state.safetensors");
  EXPECT_THAT(r.verify_error(4), HasSubstr("training_state.safetensors: tensor exp_avg_sq.lm_head.weight has a "
                                           "negative value (-1) at flat index 9 of shape [97, 32]"));
}

TEST(CheckpointVerify, FlippedBitsInTheWeightsAreCaughtOnResumeAndOnModelLoad) {
  TinyRun r;
  r.make_checkpoints();
  const std::string file = r.step_dir(4) + "/model.safetensors";
  const uint64_t at = element_offset(file, "model.layers.1.mlp.up_proj.weight", 7) + 3;  // the exponent's byte
  char byte = 0;
  std::ifstream(file, std::ios::binary).seekg(static_cast<std::streamoff>(at)).read(&byte, 1);
  byte ^= 0x40;  // ~1e-2 becomes ~1e36: finite, only the checksum can tell
  poke(file, at, &byte, 1);
  const std::string e = r.resume_error();
  EXPECT_THAT(e, HasSubstr("--resume: checkpoint " + r.step_dir(4) + ": model.safetensors: expected "));
  EXPECT_THAT(e, HasSubstr("--resume-fallback"));
  // train --model on the checkpoint, and the hook generate and serve call.
  TrainOptions o = r.options(2);
  o.model_config.clear(), o.model_dir = r.step_dir(4), o.save_dir.clear();
  EXPECT_THAT(test::input_error([&] { Trainer t(o); }), HasSubstr("--model " + r.step_dir(4) + ": model.safetensors"));
  EXPECT_THAT(test::input_error([&] { verify_model_directory(r.step_dir(4), {}, nullptr); }),
              HasSubstr("model.safetensors: expected "));
  EXPECT_NO_THROW(verify_model_directory(r.step_dir(2), {}, nullptr));
}

TEST(CheckpointVerify, TruncatedGarbageAndMissingFilesAreNamed) {
  TinyRun r;
  r.make_checkpoints();
  const std::string dir = r.step_dir(4);
  const uint64_t size = fs::file_size(dir + "/model.safetensors");
  fs::resize_file(dir + "/model.safetensors", size / 2);
  EXPECT_THAT(r.verify_error(4), HasSubstr("model.safetensors: expected " + std::to_string(size) + " bytes"));
  EXPECT_THAT(r.verify_error(4), HasSubstr("found " + std::to_string(size / 2) + " bytes (truncated)"));
  r.make_checkpoints();  // a fresh step-4
  const uint64_t state_size = fs::file_size(dir + "/training_state.safetensors");
  std::ofstream(dir + "/training_state.safetensors", std::ios::binary) << std::string(state_size, 'x');
  EXPECT_THAT(r.verify_error(4), HasSubstr("training_state.safetensors: expected " + std::to_string(state_size) +
                                           " bytes with xxh3_128 "));
  r.make_checkpoints();
  fs::remove(dir + "/config.json");
  EXPECT_THAT(r.verify_error(4), HasSubstr("config.json is missing"));
  // generation_config.json is the user's to edit or remove (docs/architecture.md §8 "Stop
  // ids and sampling defaults"): listed, not verified.
  r.make_checkpoints();
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [96, 95], "temperature": 0.6})";
  EXPECT_NO_THROW(verify_checkpoint(dir, {}, nullptr));
  fs::remove(dir + "/generation_config.json");
  EXPECT_NO_THROW(verify_checkpoint(dir, {}, nullptr));
  // … and so is tokenizer_config.json when a checkpoint carries one (its chat template).
  {
    std::ifstream in(dir + "/training_state.json");
    nlohmann::json state = nlohmann::json::parse(in);
    state["files"]["tokenizer_config.json"] = {{"bytes", 2}, {"xxh3_128", std::string(32, '0')}};
    std::ofstream(dir + "/training_state.json") << state.dump();
  }
  std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": "{{ messages }}"})";
  EXPECT_NO_THROW(verify_checkpoint(dir, {}, nullptr));
  // Other listed files stay verified: the same edit to config.json is refused.
  r.make_checkpoints();
  std::ofstream(dir + "/config.json", std::ios::app) << " ";
  EXPECT_THAT(r.verify_error(4), HasSubstr("config.json: expected "));
  r.make_checkpoints();
  std::ofstream(dir + "/training_state.json") << "{\"format_version\": 1, \"st";  // cut short: not listed, parsed
  EXPECT_THAT(r.verify_error(4), HasSubstr("training_state.json is not valid JSON"));
}

// A moment of the right size but another shape (a transposed header: still a valid
// safetensors file) is refused by shape once its checksum is made to match.
TEST(CheckpointVerify, AMomentOfAnotherShapeIsRefused) {
  TinyRun r;
  r.make_checkpoints();
  const std::string file = r.step_dir(4) + "/training_state.safetensors";
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = bytes.find("[97,32]", bytes.find("\"exp_avg.lm_head.weight\""));
  ASSERT_NE(at, std::string::npos) << bytes.substr(8, 200);
  bytes.replace(at, 7, "[32,97]");
  std::ofstream(file, std::ios::binary) << bytes;
  rehash(r.step_dir(4), "training_state.safetensors");
  EXPECT_THAT(r.verify_error(4), HasSubstr("training_state.safetensors: exp_avg.lm_head.weight is F32 [32, 97], "
                                           "expected F32 [97, 32]"));
}

TEST(CheckpointVerify, StepAndDataPositionMustAgreeWithTheDirectory) {
  TinyRun r;
  r.make_checkpoints();
  const std::string path = r.step_dir(4) + "/training_state.json";
  const json good = read_json(path);
  json j = good;
  j["step"] = 3;
  write_json(path, j);
  EXPECT_THAT(r.verify_error(4), HasSubstr("training_state.json says step 3 but the directory is of step 4"));
  j = good;
  j["state"]["step"] = 5;
  write_json(path, j);
  EXPECT_THAT(r.verify_error(4), HasSubstr("state.step 5 differs from its step 4"));
  // 4096 tokens / 16 = 256 windows, 64 steps of 4 per epoch: step 4 is epoch 0, step 4.
  j = good;
  ASSERT_EQ(j["state"]["data_loader"]["step_in_epoch"], 4);
  j["state"]["data_loader"]["step_in_epoch"] = 64;
  write_json(path, j);
  EXPECT_THAT(r.verify_error(4), HasSubstr("data_loader position (epoch 0, step_in_epoch 64) is out of range: "
                                           "step_in_epoch must lie in [0, 64)"));
  j["state"]["data_loader"]["step_in_epoch"] = 4;
  j["state"]["data_loader"]["epoch"] = 2;
  write_json(path, j);
  EXPECT_THAT(r.verify_error(4), HasSubstr("data_loader position (epoch 2, step_in_epoch 4, 64 steps per epoch) is "
                                           "not step 4 (expected epoch 0, step_in_epoch 4)"));
  // Counters out of range: negative tokens, more AdamW steps than steps taken.
  j = good;
  j["state"]["tokens"] = -5;
  write_json(path, j);
  EXPECT_THAT(r.verify_error(4), HasSubstr("training_state.json: tokens is -5; at step 4 it lies in [0, "));
  j = good;
  ASSERT_EQ(j["state"]["optimizer_steps"], 4);
  j["state"]["optimizer_steps"] = 9;
  write_json(path, j);
  EXPECT_THAT(r.verify_error(4), HasSubstr("training_state.json: optimizer_steps is 9; at step 4 it lies in [0, 4]"));
  j = good;
  j.erase("files");  // a checkpoint from before checksums: accepted with one warning
  write_json(path, j);
  std::ostringstream warn;
  EXPECT_NO_THROW(verify_checkpoint(r.step_dir(4), {}, &warn));
  EXPECT_THAT(warn.str(), HasSubstr("lists no checksums"));
}

TEST(CheckpointVerify, FallbackResumesFromTheNewestIntactCheckpointExactly) {
  TinyRun straight;  // six uninterrupted steps: the reference losses
  TrainOptions o = straight.options(6);
  o.save_dir.clear();
  Trainer reference(o);
  std::vector<double> want;
  while (reference.steps_done() < 6) want.push_back(reference.step().loss);

  TinyRun r;
  const std::vector<double> first = r.make_checkpoints();
  ASSERT_EQ(first.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(first[i], want[i]) << "step " << i + 1;
  const std::string file = r.step_dir(4) + "/training_state.safetensors";
  const std::vector<float> nan(16, std::numeric_limits<float>::quiet_NaN());
  poke(file, element_offset(file, "exp_avg.model.norm.weight", 0), nan.data(), 64);
  // Without the flag: refused, naming the file and the flag.
  const std::string refused = r.resume_error();
  EXPECT_THAT(refused, HasSubstr(r.step_dir(4) + ": training_state.safetensors: expected"));
  EXPECT_THAT(refused, HasSubstr("--resume-fallback"));
  // With it: step-4 is skipped (logged with why), step 2 resumed, and steps 3–6 are the
  // uninterrupted run's, bit for bit.
  TrainOptions f = r.options(6);
  f.resume = "auto", f.resume_fallback = true;
  {
    testing::internal::CaptureStderr();
    Trainer t(f);
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_THAT(log, HasSubstr("--resume-fallback: skipping " + r.step_dir(4) + ": checkpoint " + r.step_dir(4) +
                               ": training_state.safetensors: expected"));
    EXPECT_THAT(log, HasSubstr("--resume-fallback: resuming from " + r.step_dir(2)));
    ASSERT_EQ(t.steps_done(), 2);
    const std::vector<double> rest = TinyRun::train(t);
    ASSERT_EQ(rest.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(rest[i], want[i + 2]) << "step " << i + 3;
  }  // releases the save directory's lock
  // --resume DIR falls back to the older checkpoints beside DIR.
  poke(file, element_offset(file, "exp_avg.model.norm.weight", 0), nan.data(), 64);  // the re-saved step-4
  f.resume = r.step_dir(4);
  f.steps = 5;
  EXPECT_THAT(test::input_error([&] {
                TrainOptions plain = f;
                plain.resume_fallback = false;
                Trainer bad(plain);
              }),
              HasSubstr("--resume-fallback"));
  testing::internal::CaptureStderr();
  Trainer from_dir(f);
  EXPECT_THAT(testing::internal::GetCapturedStderr(), HasSubstr("resuming from " + r.step_dir(2)));
  EXPECT_EQ(from_dir.steps_done(), 2);
}

TEST(CheckpointVerify, FallbackWithNothingIntactNamesTheLastFailure) {
  TinyRun r;
  r.make_checkpoints();
  for (int s : {2, 4}) fs::remove(r.step_dir(s) + "/config.json");
  const std::string e = r.resume_error(true);
  EXPECT_THAT(e, HasSubstr("--resume-fallback: none of the 2 checkpoints passes verification"));
  EXPECT_THAT(e, HasSubstr(r.step_dir(2) + ": config.json is missing"));
}

}  // namespace
}  // namespace olmo2
