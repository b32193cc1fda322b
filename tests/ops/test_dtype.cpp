#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/dtype.h"
#include "core/error.h"

namespace olmo2 {
namespace {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3·2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(bf16_to_f32(0xC000), -2.0f);
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isinf(round_bf16(std::numeric_limits<float>::infinity())));
  // The largest finite f32 rounds up to infinity in bf16, as torch does.
  EXPECT_TRUE(std::isinf(round_bf16(std::numeric_limits<float>::max())));
}

TEST(DType, F16DecodesNormalsSubnormalsAndSpecials) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
}

TEST(DType, ConvertAndRoundBuffers) {
  const uint16_t bf[3] = {0x3F80, 0x4040, 0xBF00};  // 1, 3, -0.5
  float out[3];
  convert_to_f32(bf, DType::BF16, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 3.0f);
  EXPECT_EQ(out[2], -0.5f);
  float x[2] = {1.0f + std::ldexp(1.0f, -10), 2.0f};
  round_to_dtype(x, 2, DType::BF16);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_THROW(round_to_dtype(x, 2, DType::F16), ShapeError);
  DType t;
  EXPECT_TRUE(dtype_from_safetensors("BF16", &t));
  EXPECT_EQ(t, DType::BF16);
  EXPECT_FALSE(dtype_from_safetensors("F64", &t));
}

}  // namespace
}  // namespace olmo2
