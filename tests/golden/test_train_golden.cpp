// Training golden test: the loss and every parameter's gradient of a fixed batch
// against transformers + torch autograd (tests/golden/make_train_fixtures.py), for the
// recipe's Z-loss coefficient 1e-5 and a large one (0.1) that makes the Z-loss
// gradient visible. The Olmo 3 models (tests/golden/make_olmo3_fixtures.py: sliding-window
// and YaRN layers, docs/architecture.md §3) are held to the same bounds; their 12-token
// sequence is longer than both windows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/model/parameters.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/train_step.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

std::vector<int32_t> ints(const SafetensorsFile& f, const std::string& key) {
  const TensorInfo& info = f.tensors().at(key);
  std::vector<int32_t> v(static_cast<size_t>(info.shape[0]));
  std::memcpy(v.data(), f.data(info), v.size() * 4);
  return v;
}

double scalar(const SafetensorsFile& f, const std::string& key) {
  double d;
  std::memcpy(&d, f.data(f.tensors().at(key)), 8);
  return d;
}

struct Case {
  std::string model, name;
  float z_coef;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "/" << c.name; }

class TrainGoldenTest : public ::testing::TestWithParam<Case> {};

// fp32 tolerances: loss within 2e-6 relative; each gradient within 2e-5 of the largest
// magnitude of that tensor's reference gradient (max-abs-relative; measured 2e-6), i.e. the error is
// summation-order noise, not a missing term (a dropped Z-loss or norm term is ≥ 1e-2).
TEST_P(TrainGoldenTest, LossAndEveryGradientMatchTransformers) {
  const Case& cs = GetParam();
  const std::string dir = test::source_path("tests/golden/fixtures/" + cs.model);
  Olmo2Model model = Olmo2Model::load(dir);
  const SafetensorsFile ref(dir + "/train_reference.safetensors");
  std::vector<Sample> samples;
  for (int b = 0; ref.tensors().count("ids." + std::to_string(b)); ++b) {
    Sample s;
    s.input_ids = ints(ref, "ids." + std::to_string(b));
    s.labels = ints(ref, "labels." + std::to_string(b));
    samples.push_back(std::move(s));
  }
  ASSERT_EQ(samples.size(), 3u);
  const int64_t count = count_targets(samples);
  ModelWeights grads = zeros_like_weights(model.weights());
  // Two micro-batches (accumulated) must equal the reference's one batch.
  const std::vector<Sample> first(samples.begin(), samples.begin() + 1), rest(samples.begin() + 1, samples.end());
  LossSums sums = forward_backward(model, grads, first, cs.z_coef, 1.0f / static_cast<float>(count), 7);
  sums += forward_backward(model, grads, rest, cs.z_coef, 1.0f / static_cast<float>(count), 7);
  ASSERT_EQ(sums.count, count);
  const double ce = sums.ce_sum / static_cast<double>(count);
  const double z = cs.z_coef * sums.z_sq_sum / static_cast<double>(count);
  EXPECT_NEAR(ce, scalar(ref, cs.name + ".ce"), 2e-6 * ce);
  EXPECT_NEAR(z, scalar(ref, cs.name + ".z"), 2e-6 * z);
  EXPECT_NEAR(ce + z, scalar(ref, cs.name + ".loss"), 2e-6 * (ce + z));

  const std::vector<Parameter> params = list_parameters(model.mutable_weights(), grads, model.config(), model.shard());
  int checked = 0;
  double worst = 0;
  for (const Parameter& p : params) {
    const std::string key = cs.name + ".grad." + p.name;
    ASSERT_TRUE(ref.tensors().count(key)) << key;
    const TensorInfo& info = ref.tensors().at(key);
    ASSERT_EQ(info.shape, p.grad->shape()) << p.name;
    const auto* r = reinterpret_cast<const float*>(ref.data(info));
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < p.numel(); ++i) {
      float rv;
      std::memcpy(&rv, r + i, 4);
      scale = std::max(scale, static_cast<double>(std::fabs(rv)));
      diff = std::max(diff, static_cast<double>(::olmo2::test::abs_diff(p.grad->f32()[i], rv)));
    }
    ASSERT_GT(scale, 0) << p.name << ": a zero reference gradient checks nothing";
    EXPECT_LE(diff, 2e-5 * scale) << p.name << " max |diff| " << diff << " scale " << scale;
    worst = std::max(worst, diff / scale);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(ref.tensors().size() - 2 * samples.size() - 3 * 2) / 2);
  RecordProperty("worst_relative_grad_diff", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TrainGoldenTest,
                         ::testing::Values(Case{"mha-f32", "z1e-5", 1e-5f}, Case{"mha-f32", "z0.1", 0.1f},
                                           Case{"gqa-f32", "z1e-5", 1e-5f}, Case{"gqa-f32", "z0.1", 0.1f},
                                           Case{"olmo3-mha-f32", "z1e-5", 1e-5f},
                                           Case{"olmo3-mha-f32", "z0.1", 0.1f},
                                           Case{"olmo3-gqa-f32", "z1e-5", 1e-5f},
                                           Case{"olmo3-gqa-f32", "z0.1", 0.1f}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_" + info.param.name;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

}  // namespace
}  // namespace olmo2
