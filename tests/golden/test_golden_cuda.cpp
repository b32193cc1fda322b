// The forward on the GPU against transformers (ctest label gpu; skips without a GPU): the
// golden fixtures of test_golden.cpp loaded with --device cuda — logits and every layer's
// hidden state within the same bounds as on the CPU, greedy continuations equal the
// reference's, in process and through `olmo2 generate --device cuda` — and the model on
// the GPU holding its weights there only (docs/architecture.md §2, §10).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ops/tensor_ops.h"
#include "runtime/generation/generate.h"
#include "runtime/io/safetensors.h"
#include "runtime/model/model.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

struct Fixture {
  std::string name;
  Precision precision;
  double tolerance;  ///< max absolute difference on logits (hidden states: 4×)
};

// The bounds of test_golden.cpp: fp32 1e-4 absolute; bf16 0.05 absolute (the reference
// rounds to bf16, 8 significant bits, after every op; a last-bit flip of one bf16 value,
// 2^-8 relative, can propagate — ~1% of logits up to ~4).
const Fixture kFixtures[] = {
    {"mha-f32", Precision::FP32, 1e-4},     {"gqa-f32", Precision::FP32, 1e-4},
    {"sharded-f32", Precision::FP32, 1e-4}, {"odd-f32", Precision::FP32, 1e-4},
    {"gqa-bf16", Precision::BF16, 5e-2},    {"deep-gqa-f32", Precision::FP32, 1e-4},
    // Olmo 3 (sliding-window and YaRN layers, tests/golden/make_olmo3_fixtures.py).
    {"olmo3-mha-f32", Precision::FP32, 1e-4}, {"olmo3-gqa-f32", Precision::FP32, 1e-4},
    {"olmo3-gqa-bf16", Precision::BF16, 5e-2}};

std::string fixture_dir(const std::string& name) {
  return test::source_path("tests/golden/fixtures/" + name);
}

/// A host copy of a device tensor, through ops::copy (what the runtime uses).
Tensor host_copy(const Tensor& t) {
  Tensor h = Tensor::zeros(t.shape(), t.dtype());
  ops::copy(t.view(), h.view());
  return h;
}

/// Max |a − reference[key]| over an f32 host tensor.
double max_abs_diff(const Tensor& a, const SafetensorsFile& ref, const std::string& key) {
  const TensorInfo& info = ref.tensors().at(key);
  EXPECT_EQ(info.shape, a.shape()) << key;
  if (info.shape != a.shape()) return INFINITY;
  const auto* r = reinterpret_cast<const float*>(ref.data(info));
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    float rv;
    std::memcpy(&rv, r + i, 4);
    const double d = std::fabs(static_cast<double>(a.f32()[i]) - rv);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

std::vector<int32_t> ref_ids(const SafetensorsFile& ref, int b) {
  const TensorInfo& info = ref.tensors().at("ids." + std::to_string(b));
  std::vector<int32_t> ids(static_cast<size_t>(info.shape[0]));
  std::memcpy(ids.data(), ref.data(info), ids.size() * 4);
  return ids;
}

Olmo2Model load_on_gpu(const Fixture& fx) {
  const std::string dir = fixture_dir(fx.name);
  return Olmo2Model::load(dir, ShardSpec::whole(ModelConfig::load(dir)), fx.precision,
                          Device::CUDA);
}

void PrintTo(const Fixture& f, std::ostream* os) { *os << f.name; }

class GoldenCudaTest : public ::testing::TestWithParam<Fixture> {};

TEST_P(GoldenCudaTest, WeightsLiveOnTheGpuOnly) {
  OLMO2_REQUIRE_GPU();
  const Olmo2Model model = load_on_gpu(GetParam());
  EXPECT_EQ(model.device(), Device::CUDA);
  const ModelWeights& w = model.weights();
  EXPECT_EQ(w.embed_tokens.device(), Device::CUDA);
  EXPECT_EQ(w.embed_tokens.dtype(), weight_dtype(GetParam().precision));
  for (const LayerWeights& l : w.layers) {
    for (const Tensor* t :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.q_norm, &l.k_norm, &l.gate_proj,
          &l.up_proj, &l.down_proj, &l.post_attention_layernorm, &l.post_feedforward_layernorm}) {
      EXPECT_EQ(t->device(), Device::CUDA);
    }
  }
  EXPECT_EQ(w.norm.device(), Device::CUDA);
  if (!w.lm_head.empty()) {
    EXPECT_EQ(w.lm_head.device(), Device::CUDA);
  }
}

TEST_P(GoldenCudaTest, LogitsAndHiddenStatesMatchTransformers) {
  OLMO2_REQUIRE_GPU();
  const Fixture& fx = GetParam();
  const Olmo2Model model = load_on_gpu(fx);
  const SafetensorsFile ref(fixture_dir(fx.name) + "/reference.safetensors");
  const std::vector<std::vector<int32_t>> batch = {ref_ids(ref, 0), ref_ids(ref, 1)};
  ForwardOptions opts;
  opts.return_hidden = true;
  const ForwardResult out = model.forward(batch, opts);
  ASSERT_EQ(out.hidden.size(), static_cast<size_t>(model.config().num_hidden_layers));
  for (int b = 0; b < 2; ++b) {
    ASSERT_EQ(out.logits[b].device(), Device::CUDA);
    const double d = max_abs_diff(host_copy(out.logits[b]), ref, "logits." + std::to_string(b));
    EXPECT_LE(d, fx.tolerance) << fx.name << " logits of sequence " << b;
    for (size_t l = 0; l < out.hidden.size(); ++l) {
      const std::string key = "hidden." + std::to_string(l) + "." + std::to_string(b);
      EXPECT_LE(max_abs_diff(host_copy(out.hidden[l][b]), ref, key), fx.tolerance * 4)
          << fx.name << " " << key;
    }
    RecordProperty("max_logit_diff_" + std::to_string(b), std::to_string(d));
  }
}

TEST_P(GoldenCudaTest, GreedyContinuationMatchesTransformers) {
  OLMO2_REQUIRE_GPU();
  const Fixture& fx = GetParam();
  const Olmo2Model model = load_on_gpu(fx);
  std::ifstream in(fixture_dir(fx.name) + "/reference.json");
  const auto ref = nlohmann::json::parse(in);
  const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected = ref["greedy_ids"].get<std::vector<int32_t>>();
  const GenerateResult r = generate_greedy(model, prompt, static_cast<int64_t>(expected.size()));
  ASSERT_LE(r.output_ids.size(), expected.size());
  EXPECT_EQ(r.output_ids,
            std::vector<int32_t>(expected.begin(), expected.begin() + r.output_ids.size()));
}

// The command line: `olmo2 generate --device cuda` prints what transformers' greedy
// decoding gives, and says which GPU it used on stderr.
TEST_P(GoldenCudaTest, GenerateCommandOnTheGpuMatchesTransformers) {
  OLMO2_REQUIRE_GPU();
  const Fixture& fx = GetParam();
  std::ifstream in(fixture_dir(fx.name) + "/reference.json");
  const auto ref = nlohmann::json::parse(in);
  const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected = ref["greedy_ids"].get<std::vector<int32_t>>();
  std::string ids;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (i) ids += ',';
    ids += std::to_string(prompt[i]);
  }
  const auto r = test::run_olmo2("generate --model " + fixture_dir(fx.name) + " --prompt-ids " +
                                 ids + " --max-tokens " + std::to_string(expected.size()) +
                                 " --format json --device cuda" + " --precision " +
                                 precision_name(fx.precision));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::StartsWith("device cuda: GPU 0 of "));
  const auto out = nlohmann::json::parse(r.out)["output_ids"].get<std::vector<int32_t>>();
  ASSERT_LE(out.size(), expected.size());
  EXPECT_EQ(out, std::vector<int32_t>(expected.begin(), expected.begin() + out.size()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenCudaTest, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace olmo2
