// The precision policy (docs/architecture.md §3.2): which dtype a checkpoint's weights
// are held in, that nothing is held twice, and what --precision accepts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "ops/dtype.h"
#include "runtime/io/safetensors.h"
#include "runtime/model/model.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;

const std::string kBf16 = test::source_path("tests/golden/fixtures/gqa-bf16");
const std::string kF32 = test::source_path("tests/golden/fixtures/gqa-f32");

/// Every tensor of `w`, in a fixed order.
std::vector<const Tensor*> all_tensors(const ModelWeights& w) {
  std::vector<const Tensor*> out = {&w.embed_tokens, &w.norm};
  if (w.lm_head.numel() > 0) out.push_back(&w.lm_head);
  for (const LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.q_norm, &l.k_norm, &l.gate_proj,
                            &l.up_proj, &l.down_proj, &l.post_attention_layernorm, &l.post_feedforward_layernorm}) {
      out.push_back(t);
    }
  }
  return out;
}

int64_t weight_bytes(const ModelWeights& w) {
  int64_t n = 0;
  for (const Tensor* t : all_tensors(w)) n += t->numel() * static_cast<int64_t>(dtype_size(t->dtype()));
  return n;
}

TEST(Precision, ABf16CheckpointIsHeldInBf16AsLoaded) {
  const Olmo2Model m = Olmo2Model::load(kBf16);
  EXPECT_EQ(m.precision(), Precision::BF16);
  EXPECT_EQ(m.activation_dtype(), DType::BF16);
  for (const Tensor* t : all_tensors(m.weights())) EXPECT_EQ(t->dtype(), DType::BF16);
  // Two bytes per parameter: the weights are held once, in bf16.
  EXPECT_EQ(weight_bytes(m.weights()), 2 * m.config().parameter_count());
  // What is kept is what the file holds, bit for bit.
  const SafetensorsFile file(kBf16 + "/model.safetensors");
  const TensorInfo& info = file.tensors().at("model.layers.1.mlp.down_proj.weight");
  const Tensor& down = m.weights().layers[1].down_proj;
  ASSERT_EQ(info.shape, down.shape());
  EXPECT_EQ(std::memcmp(file.data(info), down.view().data(), static_cast<size_t>(down.numel()) * 2), 0);
}

TEST(Precision, Fp32WidensABf16CheckpointExactly) {
  const Olmo2Model wide = Olmo2Model::load(kBf16, ShardSpec::whole(ModelConfig::load(kBf16)), Precision::FP32);
  const Olmo2Model narrow = Olmo2Model::load(kBf16);
  EXPECT_EQ(wide.precision(), Precision::FP32);
  EXPECT_EQ(wide.activation_dtype(), DType::F32);
  const auto a = all_tensors(wide.weights()), b = all_tensors(narrow.weights());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i]->dtype(), DType::F32);
    const auto* bits = static_cast<const uint16_t*>(b[i]->view().data());
    for (int64_t j = 0; j < a[i]->numel(); ++j) ASSERT_EQ(a[i]->f32()[j], bf16_to_f32(bits[j])) << i << " " << j;
  }
  // The fp32 forward does not round activations: its logits differ from the bf16 ones
  // by more than bf16 noise somewhere, and agree within the bf16 bound.
  const std::vector<std::vector<int32_t>> batch = {{1, 5, 9, 30, 2, 7}};
  const ForwardResult rw = wide.forward(batch), rn = narrow.forward(batch);
  const Tensor &lw = rw.logits[0], &ln = rn.logits[0];
  double worst = 0;
  for (int64_t j = 0; j < lw.numel(); ++j) worst = std::max(worst, double(::olmo2::test::abs_diff(lw.f32()[j], ln.f32()[j])));
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, 0.1);
}

TEST(Precision, Bf16RoundsAnF32CheckpointToNearestEven) {
  const Olmo2Model f32 = Olmo2Model::load(kF32);
  EXPECT_EQ(f32.precision(), Precision::FP32);
  const Olmo2Model b = Olmo2Model::load(kF32, ShardSpec::whole(ModelConfig::load(kF32)), Precision::BF16);
  EXPECT_EQ(b.precision(), Precision::BF16);
  const auto a = all_tensors(f32.weights()), n = all_tensors(b.weights());
  ASSERT_EQ(a.size(), n.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(n[i]->dtype(), DType::BF16);
    const auto* bits = static_cast<const uint16_t*>(n[i]->view().data());
    for (int64_t j = 0; j < a[i]->numel(); ++j) ASSERT_EQ(bits[j], f32_to_bf16(a[i]->f32()[j])) << i << " " << j;
  }
}

TEST(Precision, NamesParseAndBadOnesAreRefused) {
  EXPECT_EQ(parse_precision("fp32", "--precision"), Precision::FP32);
  EXPECT_EQ(parse_precision("bf16", "--precision"), Precision::BF16);
  EXPECT_STREQ(precision_name(Precision::BF16), "bf16");
  try {
    parse_precision("float16", "--precision");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("--precision must be fp32 or bf16, got \"float16\""));
  }
  EXPECT_EQ(default_precision(DType::BF16), Precision::BF16);
  EXPECT_EQ(default_precision(DType::F32), Precision::FP32);
}

}  // namespace
}  // namespace olmo2
