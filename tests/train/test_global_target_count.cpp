// The global batch's target count and the loss-gradient scale derived from it, in one
// process over an in-process FakeCommunicator standing for the DP group: the count is
// an exact i64 sum past 2^24, where the former fp32 path lost targets, and the scale
// divides by that exact count (docs/architecture.md §7 (training semantics), §11.4).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "runtime/train/global_batch.h"
#include "tests/parallel/fake_communicator.h"

namespace olmo2 {
namespace {

using parallel::test::FakeCommunicator;

// A DP group of `size` in which every other rank holds `others` targets.
FakeCommunicator dp_group(int rank, int size, int64_t others) {
  return FakeCommunicator(rank, size, [others](int, const TensorView& v) {
    ASSERT_EQ(v.dtype(), DType::I64) << "the count must travel as i64";
    v.data_as<int64_t>()[0] = others;  // the count; the negative-count flag stays 0
  }, "dp");
}

// What the former path computed: each rank's count as an fp32 (hi, lo) pair, the hi
// parts summed in fp32.
int64_t former_fp32_pair_count(int64_t a, int64_t b) {
  const float hi = static_cast<float>(a) + static_cast<float>(b);
  const float lo = static_cast<float>(a - static_cast<int64_t>(static_cast<float>(a))) +
                   static_cast<float>(b - static_cast<int64_t>(static_cast<float>(b)));
  return static_cast<int64_t>(static_cast<double>(hi) + static_cast<double>(lo));
}

TEST(GlobalTargetCount, SumsAsI64PastTwoToThe24) {
  FakeCommunicator dp = dp_group(0, 2, 9'000'000);
  EXPECT_EQ(global_target_count(9'000'001, &dp), 18'000'001);
  ASSERT_EQ(dp.calls().size(), 1u) << "one all-reduce";
  EXPECT_EQ(dp.calls()[0].op, "all_reduce_sum");
  EXPECT_EQ(dp.calls()[0].dtype, DType::I64);
  EXPECT_EQ(former_fp32_pair_count(9'000'001, 9'000'000), 18'000'000)
      << "the fp32 path this replaces lost a target";
  // Far past 2^31 and 2^53 too.
  FakeCommunicator big = dp_group(1, 4, (int64_t{1} << 53) + 1);
  EXPECT_EQ(global_target_count(3, &big), 3 * ((int64_t{1} << 53) + 1) + 3);
}

TEST(GlobalTargetCount, AloneOrWithoutAGroupIsTheLocalCount) {
  EXPECT_EQ(global_target_count(16'777'217, nullptr), 16'777'217);
  FakeCommunicator one(0, 1);
  EXPECT_EQ(global_target_count(16'777'217, &one), 16'777'217);
  EXPECT_TRUE(one.calls().empty()) << "a group of one does not communicate";
}

TEST(GlobalTargetCount, ANegativeCountOnAnyRankStopsEveryRank) {
  // This rank is fine; a peer reports a negative count through the flag.
  FakeCommunicator dp(0, 3, [](int peer, const TensorView& v) {
    if (peer == 2) v.data_as<int64_t>()[0] = -5, v.data_as<int64_t>()[1] = 1;
  }, "dp");
  try {
    global_target_count(10, &dp);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "target count must be ≥ 0, but 1 rank(s) of group dp have a negative one (this rank's: 10)");
  }
  try {
    global_target_count(-1, nullptr);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "target count -1 must be ≥ 0");
  }
}

TEST(LossGradientScale, DividesByTheExactCount) {
  // A global batch of more than 2^24 targets: 9,000,001 on this DP rank, 9,000,000 on
  // the other.
  FakeCommunicator dp = dp_group(1, 2, 9'000'001);
  const int64_t count = global_target_count(9'000'000, &dp);
  ASSERT_EQ(count, 18'000'001);
  const float scale = loss_gradient_scale(1.0, count);
  EXPECT_EQ(scale, static_cast<float>(1.0 / 18'000'001.0));
  EXPECT_NE(scale, static_cast<float>(1.0 / 18'000'000.0))
      << "the divisor the fp32 count gave is a different f32 scale";
  EXPECT_EQ(loss_gradient_scale(4.0, 16'777'217), static_cast<float>(4.0 / 16'777'217.0));
  EXPECT_EQ(loss_gradient_scale(1.0, 0), 0.0f) << "no target: nothing to scale";
  EXPECT_THROW(loss_gradient_scale(1.0, -3), InputError);
  EXPECT_TRUE(std::isnan(loss_gradient_scale(std::nan(""), 3))) << "a non-finite scale propagates";
}

}  // namespace
}  // namespace olmo2
