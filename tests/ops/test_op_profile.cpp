// The op profile (ops/op_profile.h; docs/architecture.md §2 "Op profile"): off, nothing is
// recorded; on, every public op of the table counts its calls and wall time under its
// name, an op inside a timed scope counts only in the outer one, and taking the profile
// resets it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ops/op_profile.h"
#include "ops/tensor.h"
#include "ops/tensor_ops.h"

namespace olmo2::ops {
namespace {

const OpTime* find(const std::vector<OpTime>& p, const std::string& op) {
  for (const OpTime& t : p)
    if (t.op == op) return &t;
  return nullptr;
}

struct OpProfileTest : ::testing::Test {
  void SetUp() override { (void)take_op_profile(); }
  void TearDown() override {
    set_op_profiling(false);
    (void)take_op_profile();
  }
};

TEST_F(OpProfileTest, OffRecordsNothing) {
  Tensor x = Tensor::zeros({4, 8}, DType::F32);
  ASSERT_FALSE(op_profiling());
  fill(x.view(), 1.0);
  { const OpProfileScope s("by_hand"); }
  EXPECT_TRUE(take_op_profile().empty());
}

TEST_F(OpProfileTest, CountsEveryOpByNameAndResetsWhenTaken) {
  Tensor x = Tensor::zeros({64, 64}, DType::F32);
  set_op_profiling(true);
  for (int i = 0; i < 3; ++i) fill(x.view(), 2.0);
  for (int i = 0; i < 2; ++i) scale(x.view(), 0.5f);
  set_op_profiling(false);
  fill(x.view(), 3.0);  // after the profile stopped: not counted
  const std::vector<OpTime> p = take_op_profile();
  ASSERT_EQ(p.size(), 2u);
  ASSERT_NE(find(p, "fill"), nullptr);
  ASSERT_NE(find(p, "scale"), nullptr);
  EXPECT_EQ(find(p, "fill")->calls, 3);
  EXPECT_EQ(find(p, "scale")->calls, 2);
  EXPECT_GE(find(p, "fill")->seconds, 0.0);
  EXPECT_GE(p[0].seconds, p[1].seconds);  // largest first
  EXPECT_FLOAT_EQ(x.f32()[0], 3.0f);      // the ops still ran
  EXPECT_TRUE(take_op_profile().empty());
}

TEST_F(OpProfileTest, ANestedOpCountsOnlyInTheOuterScopeWithItsWallTime) {
  Tensor x = Tensor::zeros({8}, DType::F32);
  set_op_profiling(true);
  {
    const OpProfileScope outer("outer");
    fill(x.view(), 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  fill(x.view(), 1.0);
  const std::vector<OpTime> p = take_op_profile();
  ASSERT_EQ(p.size(), 2u);
  ASSERT_NE(find(p, "outer"), nullptr);
  EXPECT_EQ(find(p, "outer")->calls, 1);
  EXPECT_GE(find(p, "outer")->seconds, 0.030);
  EXPECT_LT(find(p, "outer")->seconds, 5.0);
  EXPECT_EQ(find(p, "fill")->calls, 1);  // only the call outside the scope
  EXPECT_LT(find(p, "fill")->seconds, find(p, "outer")->seconds);
}

}  // namespace
}  // namespace olmo2::ops
