// The named-activation fixtures (tests/golden/make_activation_fixtures.py) as the tests
// read them, and how a read is compared with them (docs/architecture.md §10, §13).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"
#include "runtime/trace/trace_spec.h"
#include "tests/test_util.h"

namespace olmo2::test {

/// The factor a read's difference from the reference is divided by before it is held to
/// 1e-4: 1, or max|reference| / 50 for tensors whose entries reach beyond 50 (the deeper
/// layers' mlp_neurons reach ~100, where f32 sums in another order than PyTorch's differ
/// by a few ulps, ~1e-6 relative, already ~1e-4 absolute).
inline double tolerance_scale(double max_abs_reference) { return std::max(1.0, max_abs_reference / 50.0); }

/// Max |a − b| over the entries, divided by tolerance_scale of b's largest entry (a
/// failure when the sizes differ).
inline double scaled_max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, double(::olmo2::test::abs_diff(a[i], b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return worst / tolerance_scale(scale);
}

/// The values of one entry of a response's `activations` (its base64 little-endian f32).
inline std::vector<float> read_values(const nlohmann::json& entry) {
  const std::vector<uint8_t> bytes = trace::base64_decode(entry.at("data").get<std::string>(), "data");
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

/// A fixture model directory with its activations.{json,safetensors}.
struct ActivationFixture {
  std::string dir;
  nlohmann::json meta;
  SafetensorsFile ref;
  std::vector<int32_t> ids;  ///< sequence_ids: the prompt and the fed generated tokens
  explicit ActivationFixture(const std::string& name)
      : dir(source_path("tests/golden/fixtures/" + name)),
        meta(nlohmann::json::parse(std::ifstream(dir + "/activations.json"))),
        ref(dir + "/activations.safetensors"),
        ids(meta.at("sequence_ids").get<std::vector<int32_t>>()) {}
  /// The f32 tensor `key` (e.g. "read.logits"), flat; its shape into `shape` when given.
  std::vector<float> values(const std::string& key, std::vector<int64_t>* shape = nullptr) const {
    const TensorInfo& info = ref.tensors().at(key);
    if (shape) *shape = info.shape;
    std::vector<float> v((info.end - info.begin) / 4);
    std::memcpy(v.data(), ref.data(info), v.size() * 4);
    return v;
  }
  std::vector<int32_t> prompt() const { return meta.at("prompt_ids").get<std::vector<int32_t>>(); }
};

}  // namespace olmo2::test
