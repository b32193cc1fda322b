// Model loading errors, batching and the KV cache (numerics vs transformers are in
// tests/golden).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include <nlohmann/json.hpp>

#include "runtime/generation/generate.h"
#include "runtime/model/model.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::string kMha = test::source_path("tests/golden/fixtures/mha-f32");

/// Copies the mha-f32 fixture into `dir`, editing its safetensors header with `edit`
/// (the data section is kept byte for byte).
void doctored_copy(const test::TempDir& dir, const std::function<void(json&)>& edit) {
  std::filesystem::copy_file(kMha + "/config.json", dir.file("config.json"));
  std::ifstream in(kMha + "/model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  json header = json::parse(bytes.substr(8, n));
  edit(header);
  const std::string text = header.dump();
  std::ofstream out(dir.file("model.safetensors"), std::ios::binary);
  const uint64_t m = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((m >> (8 * i)) & 0xff));
  out << text << bytes.substr(8 + n);
}

std::string load_error(const std::string& dir) {
  try {
    Olmo2Model::load(dir);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ModelLoad, AbsentNormWeightIsAnErrorNotOnes) {
  test::TempDir dir;
  doctored_copy(dir, [](json& h) { h.erase("model.layers.1.post_feedforward_layernorm.weight"); });
  EXPECT_THAT(load_error(dir.path()), HasSubstr("has no tensor model.layers.1.post_feedforward_layernorm.weight"));
  test::TempDir dir2;
  doctored_copy(dir2, [](json& h) { h.erase("model.layers.0.self_attn.k_norm.weight"); });
  EXPECT_THAT(load_error(dir2.path()), HasSubstr("model.layers.0.self_attn.k_norm.weight"));
}

TEST(ModelLoad, WrongShapeNamesTensorExpectedAndFound) {
  test::TempDir dir;
  doctored_copy(dir, [](json& h) { h["model.layers.0.mlp.gate_proj.weight"]["shape"] = {64, 96}; });
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr("tensor model.layers.0.mlp.gate_proj.weight has shape [64, 96], expected [96, 64]"));
}

TEST(ModelLoad, UnsupportedDtypeIsNamed) {
  test::TempDir dir;
  doctored_copy(dir, [](json& h) {
    h["model.norm.weight"]["dtype"] = "F64";
    h["model.norm.weight"]["shape"] = {32};  // same bytes as 64 f32
  });
  EXPECT_THAT(load_error(dir.path()), HasSubstr("tensor model.norm.weight has dtype F64"));
}

TEST(ModelLoad, MissingWeightsFileIsNamed) {
  test::TempDir dir;
  std::filesystem::copy_file(kMha + "/config.json", dir.file("config.json"));
  EXPECT_THAT(load_error(dir.path()), HasSubstr("no model.safetensors or model.safetensors.index.json"));
}

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, double(::olmo2::test::abs_diff(a.f32()[i], b.f32()[i])));
  return d;
}

TEST(ModelForward, BatchEqualsSequencesAlone) {
  const Olmo2Model m = Olmo2Model::load(kMha);
  const std::vector<int32_t> a = {1, 5, 9, 100, 3}, b = {7, 7, 2};
  const ForwardResult both = m.forward({a, b});
  EXPECT_LE(max_diff(both.logits[0], m.forward({a}).logits[0]), 1e-5);
  EXPECT_LE(max_diff(both.logits[1], m.forward({b}).logits[0]), 1e-5);
  EXPECT_THROW(m.forward({a, {}}), InputError);
  EXPECT_THROW(m.forward({{1, 160}}), InputError);  // id == vocab_size
}

TEST(ModelForward, KvCacheIncrementalEqualsFullForward) {
  const Olmo2Model m = Olmo2Model::load(test::source_path("tests/golden/fixtures/gqa-f32"));
  const std::vector<int32_t> seq = {3, 14, 15, 92, 65, 35, 89, 79};
  const ForwardResult full = m.forward({seq});
  // A contiguous cache: 8 positions in blocks of 3 (the last block partly used).
  const KVCache cache = KVCache::contiguous(m.config(), m.shard(), 8, 3);
  const std::vector<int32_t> table = KVCache::consecutive_blocks(8, 3);
  ASSERT_EQ(table, (std::vector<int32_t>{0, 1, 2}));
  ForwardOptions last;
  last.last_logits_only = true;
  auto step = [&](std::span<const int32_t> tokens, int64_t start) {
    return m.forward(TokenBatch{{tokens}, {start}, {table}}, &cache, last);
  };
  const std::vector<int32_t> prefix(seq.begin(), seq.begin() + 5);
  step(prefix, 0);
  for (size_t t = 5; t < seq.size(); ++t) {
    const ForwardResult one = step(std::span<const int32_t>(&seq[t], 1), static_cast<int64_t>(t));
    const float* ref = full.logits[0].f32() + t * m.config().vocab_size;
    for (int64_t v = 0; v < m.config().vocab_size; ++v) ASSERT_NEAR(one.logits[0].f32()[v], ref[v], 1e-5);
  }
  const int32_t one = 1;  // position 9: past the 3 blocks of 3
  EXPECT_THROW(m.forward(TokenBatch{{std::span<const int32_t>(&one, 1)}, {9}, {table}}, &cache, last), ShapeError);
}

TEST(Generate, RefusesBadPromptsWithTheNumbers) {
  const Olmo2Model m = Olmo2Model::load(kMha);
  auto err = [&](const std::vector<int32_t>& p, int64_t n) {
    try {
      generate_greedy(m, p, n);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(err({}, 4), HasSubstr("prompt is empty"));
  EXPECT_THAT(err({1, 2, 999}, 4), HasSubstr("token id 999 at position 2"));
  EXPECT_THAT(err({1}, 0), HasSubstr("at least 1"));
  EXPECT_THAT(err(std::vector<int32_t>(60, 1), 5), HasSubstr("prompt of 60 tokens + max_tokens 5 exceeds the context length 64"));
  // No overflow of prompt + max tokens on the way to the refusal.
  EXPECT_THAT(err({1, 2, 3}, INT64_MAX - 1), HasSubstr("exceeds the context length 64"));
}

}  // namespace
}  // namespace olmo2
