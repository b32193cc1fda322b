// select_tokens with the logits on the GPU (candidates made there by ops::top_candidates,
// target rows' logits gathered there, adjusted rows copied to the host; docs/architecture.md
// §8) against the same logits on the host: the same tokens and
// alternatives, the log-probabilities within fp32 rounding (the device's Σexp may differ
// from the host's in its last bit: ≤ 2^-23 relative, so ≤ 1.2e-7 in the log-sum-exp).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ops/device_runtime.h"
#include "ops/tensor_ops.h"
#include "ops/top_candidates.h"
#include "runtime/generation/token_selection.h"

namespace olmo2 {
namespace {

SelectionRequest request(double temperature, int64_t top_k, double top_p, uint64_t seed, int32_t logprobs) {
  SelectionRequest r;
  r.params = {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed};
  r.draw = 3;
  r.logprobs = logprobs;
  return r;
}

/// A prompt position scored against `target` (held by the whole vocabulary, and by the
/// second slice only for ids ≥ 50176).
SelectionRequest scored(int32_t target, int32_t logprobs) {
  SelectionRequest r = request(0, 0, 1, 0, logprobs);
  r.target = target;
  return r;
}

/// With a logit_bias and penalties: copied to the host whole, chosen there.
SelectionRequest adjusted(double temperature, int64_t top_k, int32_t logprobs) {
  SelectionRequest r = request(temperature, top_k, 1, 8, logprobs);
  r.adjust.logit_bias = {{17, -100.0f}, {60001, 30.0f}};
  r.adjust.repetition_penalty = 1.5;
  r.output_counts = {{5, 2}, {60002, 1}};
  return r;
}

TEST(TokenSelectionOnDevice, SameTokensAndLogprobsAsTheHostRows) {
  std::string why;
  if (ops::gpu_count(&why) == 0) GTEST_SKIP() << "no GPU: " << why;
  // OLMo 2's vocabulary (100278 real ids padded to 100352): whole, and the second of two
  // TP slices (ids from 50176; its last 74 columns padding).
  ShardSpec whole, second;
  whole.vocab_rows = {0, 100352}, whole.vocab_real = {0, 100278};
  second.vocab_rows = {50176, 100352}, second.vocab_real = {50176, 100278};
  const int64_t over = ops::kMaxDeviceTopCandidates + 44;  // copied to the host whole
  const std::vector<SelectionRequest> kinds = {
      request(0, 0, 1, 1, 0),     request(0, 0, 1, 1, 5),      request(0.7, 50, 1, 2, 0),
      request(0.9, 40, 0.8, 3, 20), request(1.0, 0, 0.9, 4, 0), request(1.0, 0, 1, 5, 3),
      request(0.8, 1, 1, 6, 2),   request(1.0, over, 0.95, 7, 4), scored(60000, 3), scored(100, 0),
      scored(100277, 2),          adjusted(0, 0, 3),           adjusted(0.9, 30, 2)};
  std::mt19937 rng(21);
  for (const ShardSpec* shard : {&whole, &second}) {
    const int64_t slice = shard->vocab_rows.size();
    for (const float sd : {0.5f, 3.0f}) {
      std::vector<Tensor> host, dev;
      std::vector<TensorView> host_rows, dev_rows;
      std::normal_distribution<float> normal(0.0f, sd);
      for (size_t i = 0; i < kinds.size(); ++i) {
        host.push_back(Tensor::zeros({1, slice}));
        for (int64_t j = 0; j < slice; ++j) host.back().f32()[j] = j >= shard->vocab_real.size() ? 1e30f : normal(rng);
        if (i % 3 == 0) host.back().f32()[17] = host.back().f32()[5] = 40.0f;  // a tie at the top
        dev.push_back(Tensor::zeros({1, slice}, DType::F32, Device::CUDA));
        ops::copy(host.back().view(), dev.back().view());
      }
      for (size_t i = 0; i < kinds.size(); ++i) host_rows.push_back(host[i].view()), dev_rows.push_back(dev[i].view());
      const std::vector<SelectedToken> want = select_tokens(host_rows, *shard, kinds, nullptr);
      const std::vector<SelectedToken> got = select_tokens(dev_rows, *shard, kinds, nullptr);
      // One row alone takes the path without the gather.
      const SelectedToken alone = select_tokens({dev_rows[1]}, *shard, {kinds[1]}, nullptr)[0];
      EXPECT_EQ(alone.id, want[1].id);
      EXPECT_NEAR(alone.logprob, want[1].logprob, 1e-6);
      for (size_t i = 0; i < kinds.size(); ++i) {
        SCOPED_TRACE(testing::Message() << "row " << i << " sd " << sd << " first id " << shard->vocab_rows.begin);
        EXPECT_EQ(got[i].id, want[i].id);
        EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-6);
        ASSERT_EQ(got[i].top.size(), want[i].top.size());
        for (size_t j = 0; j < want[i].top.size(); ++j) {
          EXPECT_EQ(got[i].top[j].id, want[i].top[j].id);
          EXPECT_NEAR(got[i].top[j].logit, want[i].top[j].logit, 1e-6);
        }
      }
    }
  }
}

}  // namespace
}  // namespace olmo2
