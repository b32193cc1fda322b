// The CPU forward against transformers: logits and every layer's output hidden state
// for a batch of two sequences of different lengths, and greedy continuations.
// Fixtures: tests/golden/make_fixtures.py (OLMo 2) and make_olmo3_fixtures.py (Olmo 3:
// sliding-window and YaRN layers, docs/architecture.md §3; versions in
// fixtures/VERSIONS.json).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/generation/generate.h"
#include "runtime/model/model.h"
#include "runtime/model/rope_frequencies.h"
#include "runtime/io/safetensors.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

struct Fixture {
  std::string name;
  double tolerance;  ///< max absolute difference allowed
};

// fp32: 1e-4 absolute (the bound the project holds its f32 forward to). bf16: the reference rounds activations to
// bf16 (8 significant bits) after every op; our fp32 kernels round at the same points
// but accumulate in another order, so a last-bit flip of a bf16 value (relative 2^-8)
// can propagate. 0.05 absolute on logits of magnitude up to ~4 is ~1% relative.
// The Olmo 3 models are held to the same bounds.
const Fixture kFixtures[] = {{"mha-f32", 1e-4},       {"gqa-f32", 1e-4},       {"sharded-f32", 1e-4},
                             {"odd-f32", 1e-4},       {"gqa-bf16", 5e-2},      {"deep-gqa-f32", 1e-4},
                             {"olmo3-mha-f32", 1e-4}, {"olmo3-gqa-f32", 1e-4}, {"olmo3-gqa-bf16", 5e-2}};

std::string fixture_dir(const std::string& name) {
  return test::source_path("tests/golden/fixtures/" + name);
}

/// Max |a − b| over two f32 buffers of the same shape.
double max_abs_diff(const Tensor& a, const SafetensorsFile& ref, const std::string& key) {
  const TensorInfo& info = ref.tensors().at(key);
  EXPECT_EQ(info.shape, a.shape()) << key;
  const auto* r = reinterpret_cast<const float*>(ref.data(info));
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    float rv;
    std::memcpy(&rv, r + i, 4);
    worst = std::max(worst, static_cast<double>(::olmo2::test::abs_diff(a.f32()[i], rv)));
  }
  return worst;
}

std::vector<int32_t> ref_ids(const SafetensorsFile& ref, int b) {
  const TensorInfo& info = ref.tensors().at("ids." + std::to_string(b));
  std::vector<int32_t> ids(static_cast<size_t>(info.shape[0]));
  std::memcpy(ids.data(), ref.data(info), ids.size() * 4);
  return ids;
}

void PrintTo(const Fixture& f, std::ostream* os) { *os << f.name; }

class GoldenTest : public ::testing::TestWithParam<Fixture> {};

TEST_P(GoldenTest, LogitsAndHiddenStatesMatchTransformers) {
  const Fixture& fx = GetParam();
  const Olmo2Model model = Olmo2Model::load(fixture_dir(fx.name));
  const SafetensorsFile ref(fixture_dir(fx.name) + "/reference.safetensors");
  const std::vector<std::vector<int32_t>> batch = {ref_ids(ref, 0), ref_ids(ref, 1)};
  ASSERT_NE(batch[0].size(), batch[1].size()) << "the batch must mix lengths";
  ForwardOptions opts;
  opts.return_hidden = true;
  const ForwardResult out = model.forward(batch, opts);
  ASSERT_EQ(out.hidden.size(), static_cast<size_t>(model.config().num_hidden_layers));
  for (int b = 0; b < 2; ++b) {
    const double d = max_abs_diff(out.logits[b], ref, "logits." + std::to_string(b));
    EXPECT_LE(d, fx.tolerance) << fx.name << " logits of sequence " << b;
    for (size_t l = 0; l < out.hidden.size(); ++l) {
      const std::string key = "hidden." + std::to_string(l) + "." + std::to_string(b);
      EXPECT_LE(max_abs_diff(out.hidden[l][b], ref, key), fx.tolerance * 4) << fx.name << " " << key;
    }
    RecordProperty("max_logit_diff_" + std::to_string(b), std::to_string(d));
  }
}

TEST_P(GoldenTest, GreedyContinuationMatchesTransformers) {
  const Fixture& fx = GetParam();
  const Olmo2Model model = Olmo2Model::load(fixture_dir(fx.name));
  std::ifstream in(fixture_dir(fx.name) + "/reference.json");
  const auto ref = nlohmann::json::parse(in);
  const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected = ref["greedy_ids"].get<std::vector<int32_t>>();
  GenerateResult r = generate_greedy(model, prompt, static_cast<int64_t>(expected.size()));
  // The reference loop does not stop at eos; compare the common prefix, then the reason.
  ASSERT_LE(r.output_ids.size(), expected.size());
  EXPECT_EQ(r.output_ids, std::vector<int32_t>(expected.begin(), expected.begin() + r.output_ids.size()));
  const auto& eos = model.config().eos_token_ids;
  const bool hit = r.output_ids.size() < expected.size() ||
                   std::find(eos.begin(), eos.end(), r.output_ids.back()) != eos.end();
  EXPECT_EQ(r.finish_reason, hit ? "stop" : "length");
  EXPECT_EQ(model.config().parameter_count(), ref["parameter_count"].get<int64_t>());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

// Olmo 3: every layer's type, window and RoPE frequencies as transformers built them
// (reference.json "rope": its inv_freq buffer and attention scaling per layer type).
// inv_freq bit for bit (docs/architecture.md §3: each f32 operation where PyTorch does
// it); the scaling, a Python float there and f32 here, to f32 rounding.
TEST(GoldenOlmo3, LayerTypesWindowsAndRopeFrequenciesMatchTransformers) {
  for (const char* name : {"olmo3-mha-f32", "olmo3-gqa-f32", "olmo3-gqa-bf16", "olmo3-tok-f32"}) {
    const ModelConfig c = ModelConfig::load(fixture_dir(name));
    std::ifstream cin(fixture_dir(name) + "/config.json"), rin(fixture_dir(name) + "/reference.json");
    const auto cfg = nlohmann::json::parse(cin);
    const auto ref = nlohmann::json::parse(rin);
    ASSERT_TRUE(c.olmo3()) << name;
    ASSERT_EQ(c.layer_types.size(), cfg["layer_types"].size()) << name;
    for (size_t l = 0; l < c.layer_types.size(); ++l) {
      const std::string type = cfg["layer_types"][l];
      const bool sliding = type == "sliding_attention";
      EXPECT_EQ(c.layer_types[l], sliding ? AttentionType::Sliding : AttentionType::Full) << name << " layer " << l;
      EXPECT_EQ(c.attention_window(static_cast<int64_t>(l)), sliding ? cfg["sliding_window"].get<int64_t>() : 0)
          << name << " layer " << l;
      const RopeParameters& p = c.rope_parameters(static_cast<int64_t>(l));
      EXPECT_EQ(p.type, ref["rope"][type]["rope_type"].get<std::string>()) << name << " layer " << l;
      const ops::RopeFrequencies f = rope_frequencies(p, static_cast<int>(c.head_dim));
      const auto want = ref["rope"][type]["inv_freq"].get<std::vector<double>>();
      ASSERT_EQ(f.inv_freq.size(), want.size()) << name << " " << type;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(f.inv_freq[i], static_cast<float>(want[i])) << name << " " << type << " inv_freq[" << i << "]";
      }
      const double scaling = ref["rope"][type]["attention_scaling"].get<double>();
      EXPECT_NEAR(f.attention_scaling, scaling, 1e-7 * scaling) << name << " " << type;
    }
    EXPECT_TRUE(c.has_sliding_layers()) << name;
  }
}

// The released configurations (make_fixtures.py's RELEASED and RELEASED_OLMO3: the sizes
// allenai publishes for OLMo 2 1B/7B/13B/32B and Olmo 3 7B/32B), each with the parameter
// count transformers builds for it on the meta device.
TEST(GoldenConfigs, ParameterCountsOfReleasedModels) {
  for (const char* name : {"OLMo-2-0425-1B", "OLMo-2-1124-7B", "OLMo-2-1124-13B", "OLMo-2-0325-32B",
                           "olmo3-7b", "olmo3-32b"}) {
    const std::string dir = fixture_dir(std::string("configs/") + name);
    std::ifstream in(dir + "/parameter_count.txt");
    int64_t expected = 0;
    in >> expected;
    EXPECT_EQ(ModelConfig::load(dir).parameter_count(), expected) << name;
  }
  // The released configurations' parameter counts (docs/architecture.md §3),
  // independent of the fixture files.
  EXPECT_EQ(ModelConfig::load(fixture_dir("configs/OLMo-2-0425-1B")).parameter_count(), 1484916736);
  EXPECT_EQ(ModelConfig::load(fixture_dir("configs/OLMo-2-0325-32B")).parameter_count(), 32234279936);
  const ModelConfig olmo3_7b = ModelConfig::load(fixture_dir("configs/olmo3-7b"));
  EXPECT_EQ(olmo3_7b.parameter_count(), 7298011136);
  EXPECT_EQ(olmo3_7b.rope_full.type, "yarn");
  EXPECT_EQ(olmo3_7b.attention_window(0), 4096);
  EXPECT_EQ(olmo3_7b.attention_window(3), 0);
  EXPECT_EQ(ModelConfig::load(fixture_dir("configs/olmo3-32b")).parameter_count(), 32233522176);
}

}  // namespace
}  // namespace olmo2
