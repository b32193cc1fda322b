#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ops/tensor.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;

TEST(Tensor, ZerosIsContiguousAlignedAndZero) {
  Tensor t = Tensor::zeros({3, 5});
  EXPECT_EQ(t.numel(), 15);
  EXPECT_TRUE(t.view().is_contiguous());
  EXPECT_EQ(t.view().strides(), (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.f32()) % 64, 0u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.f32()[i], 0.0f);
  EXPECT_EQ(t.view().bytes(), 60u);
}

TEST(Tensor, RowsAndReshapeShareMemory) {
  Tensor t = Tensor::zeros({4, 3});
  for (int i = 0; i < 12; ++i) t.f32()[i] = static_cast<float>(i);
  TensorView r = t.view().rows(1, 3);
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.f32()[0], 3.0f);
  r.f32()[0] = 42.0f;
  EXPECT_EQ(t.f32()[3], 42.0f);
  TensorView flat = t.view().reshape({12});
  EXPECT_EQ(flat.f32()[3], 42.0f);
  EXPECT_THROW(t.view().reshape({5}), ShapeError);
  EXPECT_THROW(t.view().rows(3, 5), ShapeError);
}

TEST(Tensor, StridedViewIsNotContiguous) {
  Tensor t = Tensor::zeros({4, 6});
  TensorView cols(t.f32() + 2, DType::F32, {4, 2}, {6, 1}, Device::CPU);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_THROW(cols.reshape({8}), ShapeError);
}

TEST(Tensor, WrongDtypeAccessNamesIt) {
  Tensor t = Tensor::zeros({2}, DType::BF16);
  try {
    t.view().f32();
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("bf16"));
  }
}

}  // namespace
}  // namespace olmo2
