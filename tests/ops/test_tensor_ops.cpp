// The ops between kernels (ops/tensor_ops.h), the split forms of RMSNorm and of the
// vocab-parallel cross-entropy, the vocab-slice embedding, and the device dispatch
// (ops/dispatch.cpp): every value against a loop written here from the contract.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ops/backward.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/tensor_ops.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {
namespace {

using ::testing::HasSubstr;
using test::random_tensor;

template <typename Fn>
std::string shape_error(Fn&& fn) {
  try {
    fn();
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "no ShapeError";
}

TEST(TensorOps, CopyStridedViewsAndConvertsBetweenF32AndBf16) {
  const Tensor src = random_tensor({5, 9}, 1);
  Tensor dst = Tensor::zeros({9, 5});
  // A transposed view: element (i, j) of dst's view is dst[j, i].
  const TensorView dst_t(dst.f32(), DType::F32, {5, 9}, {1, 5}, Device::CPU);
  copy(src.view(), dst_t);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 9; ++j) EXPECT_EQ(dst.f32()[j * 5 + i], src.f32()[i * 9 + j]);
  // Columns 2..5 into a contiguous block.
  Tensor block = Tensor::zeros({5, 3});
  copy(src.view().cols(2, 5), block.view());
  EXPECT_EQ(block.f32()[4 * 3 + 2], src.f32()[4 * 9 + 4]);
  // f32 → bf16 rounds to nearest even; bf16 → f32 is exact.
  Tensor half = Tensor::zeros({5, 9}, DType::BF16), back = Tensor::zeros({5, 9});
  copy(src.view(), half.view());
  copy(half.view(), back.view());
  for (int64_t i = 0; i < 45; ++i) EXPECT_EQ(back.f32()[i], round_bf16(src.f32()[i]));
  EXPECT_THAT(shape_error([&] { copy(src.view(), Tensor::zeros({9, 5}).view()); }), HasSubstr("copy: [5, 9] to [9, 5]"));
  EXPECT_THAT(shape_error([&] { copy(src.view(), Tensor::zeros({5, 9}, DType::I32).view()); }),
              HasSubstr("f32 to i32 is not a supported conversion"));
}

TEST(TensorOps, FillGatherScatterRoundScale) {
  Tensor t = Tensor::zeros({4, 3}, DType::I64);
  fill(t.view().cols(1, 2), 7);
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(t.view().data_as<int64_t>()[r * 3 + 1], 7);
  EXPECT_EQ(t.view().data_as<int64_t>()[0], 0);

  const Tensor src = random_tensor({6, 4}, 2);
  int32_t ix[3] = {5, 0, 5};
  Tensor g = Tensor::zeros({3, 4});
  gather_rows(src.view(), host_view(ix), g.view());
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_EQ(g.f32()[j], src.f32()[20 + j]);
    EXPECT_EQ(g.f32()[4 + j], src.f32()[j]);
  }
  Tensor pool = Tensor::zeros({8, 4});
  int32_t rows[2] = {6, 1};
  scatter_rows(src.view().rows(0, 2), host_view(rows), pool.view());
  EXPECT_EQ(pool.f32()[6 * 4 + 3], src.f32()[3]);
  EXPECT_EQ(pool.f32()[1 * 4], src.f32()[4]);
  EXPECT_EQ(pool.f32()[0], 0.0f);
  int32_t bad[2] = {6, 8};
  EXPECT_THAT(shape_error([&] { scatter_rows(src.view().rows(0, 2), host_view(bad), pool.view()); }),
              HasSubstr("index 8 at 1 is outside [0, 8)"));
  // Two rows to one destination: last-writer-wins here, a race on a GPU; refused on both.
  int32_t twice[3] = {2, 5, 2};
  Tensor before = Tensor::zeros({8, 4});
  copy(pool.view(), before.view());
  EXPECT_THAT(shape_error([&] { scatter_rows(src.view().rows(0, 3), host_view(twice), pool.view()); }),
              HasSubstr("scatter_rows: index 2 at 2 repeats the one at 0"));
  for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(pool.f32()[i], before.f32()[i]) << "a refused scatter wrote";
  EXPECT_NO_THROW(gather_rows(src.view(), host_view(twice), Tensor::zeros({3, 4}).view())) << "gathers may repeat";

  Tensor x = random_tensor({3, 5}, 3);
  Tensor y = Tensor::zeros({3, 5});
  copy(x.view(), y.view());
  round_to(y.view().cols(0, 2), DType::BF16);  // strided rows
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(y.f32()[r * 5], round_bf16(x.f32()[r * 5]));
    EXPECT_EQ(y.f32()[r * 5 + 4], x.f32()[r * 5 + 4]);  // outside the view: untouched
  }
  scale(x.view(), 0.5f);
  EXPECT_EQ(x.f32()[7], y.f32()[7] * 0.5f);
}

TEST(TensorOps, SumsInDoubleInAFixedOrder) {
  const Tensor x = random_tensor({3, 20000}, 4);  // 60000 elements: four chunks of 2^14
  double want = 10.0;
  for (int64_t c = 0; c < 60000; c += 1 << 14) {
    double s = 0;
    for (int64_t i = c; i < std::min<int64_t>(60000, c + (1 << 14)); ++i) s += double(x.f32()[i]) * x.f32()[i];
    want += s;
  }
  EXPECT_EQ(sum_squares(x.view(), 10.0), want);
  double norms = 0;
  for (int64_t r = 0; r < 3; ++r) {
    double sq = 0;
    for (int64_t j = 0; j < 20000; ++j) sq += double(x.f32()[r * 20000 + j]) * x.f32()[r * 20000 + j];
    norms += std::sqrt(sq);
  }
  EXPECT_EQ(sum_row_norms(x.view()), norms);
}

TEST(RmsNormSplit, PartialsAndApplyAreRmsNormBitForBit) {
  const Tensor x = random_tensor({7, 48}, 5), w = random_tensor({48}, 6);
  Tensor whole = Tensor::zeros({7, 48}), split = Tensor::zeros({7, 48});
  rmsnorm(x.view(), w.view(), 1e-6f, whole.view());
  Tensor stats = Tensor::zeros({7, 2});
  const TensorView col(stats.f32() + 1, DType::F32, {7}, {2}, Device::CPU);  // a strided column
  rmsnorm_partials(x.view(), col);
  rmsnorm_apply(x.view(), w.view(), col, 48, 1e-6f, split.view());
  EXPECT_EQ(std::memcmp(whole.f32(), split.f32(), whole.view().bytes()), 0);
  // Two column halves with the summed statistics give the whole row's norm (the TP form).
  Tensor s0 = Tensor::zeros({7}), s1 = Tensor::zeros({7});
  rmsnorm_partials(x.view().cols(0, 24), s0.view());
  rmsnorm_partials(x.view().cols(24, 48), s1.view());
  for (int64_t t = 0; t < 7; ++t) s0.f32()[t] += s1.f32()[t];
  Tensor half = Tensor::zeros({7, 24});
  rmsnorm_apply(x.view().cols(24, 48), TensorView(w.f32() + 24, DType::F32, {24}), s0.view(), 48, 1e-6f, half.view());
  for (int64_t t = 0; t < 7; ++t)
    for (int64_t i = 0; i < 24; ++i) EXPECT_NEAR(half.f32()[t * 24 + i], whole.f32()[t * 48 + 24 + i], 1e-5);
}

TEST(EmbeddingSlice, RowsOfTheSliceAndZerosElsewhereAndTheBackward) {
  const Tensor table = random_tensor({4, 3}, 7);  // ids 10..13
  int32_t ids[4] = {12, 3, 10, 12};
  Tensor out = Tensor::zeros({4, 3});
  fill(out.view(), 9.0);
  embedding_slice(host_view(ids), table.view(), 10, out.view());
  for (int64_t j = 0; j < 3; ++j) {
    EXPECT_EQ(out.f32()[j], table.f32()[2 * 3 + j]);
    EXPECT_EQ(out.f32()[3 + j], 0.0f);  // another rank's id
    EXPECT_EQ(out.f32()[6 + j], table.f32()[j]);
  }
  const Tensor dout = random_tensor({4, 3}, 8);
  Tensor dtable = Tensor::zeros({4, 3});
  embedding_slice_backward(host_view(ids), dout.view(), 10, dtable.view());
  for (int64_t j = 0; j < 3; ++j) {
    EXPECT_EQ(dtable.f32()[2 * 3 + j], dout.f32()[j] + dout.f32()[9 + j]);  // id 12 twice, in order
    EXPECT_EQ(dtable.f32()[j], dout.f32()[6 + j]);
    EXPECT_EQ(dtable.f32()[3 + j], 0.0f);
  }
}

TEST(VocabParallelCrossEntropy, ThreeStepsOnOneSliceEqualTheFusedLoss) {
  // One "rank" holding the whole vocabulary of 10, plus 2 padding columns.
  const int64_t rows = 3, vocab = 10, cols = 12;
  Tensor logits = random_tensor({rows, cols}, 9, 2.0f);
  int32_t targets[rows] = {4, kIgnoreIndex, 9};
  Tensor fused_grad = Tensor::zeros({rows, vocab}), grad = Tensor::zeros({rows, cols});
  const CrossEntropySums fused =
      cross_entropy_zloss(logits.view().cols(0, vocab), host_view(targets), 1e-4f, 0.5f, fused_grad.view());
  Tensor mx = Tensor::zeros({rows}), stats = Tensor::zeros({rows, 2});
  vocab_parallel_ce_row_max(logits.view(), vocab, mx.view());
  vocab_parallel_ce_partials(logits.view(), vocab, 0, host_view(targets), mx.view(), stats.view(), grad.view());
  const CrossEntropySums split =
      vocab_parallel_ce_finish(mx.view(), stats.view(), host_view(targets), 0, vocab, 1e-4f, 0.5f, grad.view());
  EXPECT_EQ(split.count, 2);
  EXPECT_NEAR(split.ce_sum, fused.ce_sum, 1e-5);
  EXPECT_NEAR(split.z_sq_sum, fused.z_sq_sum, 1e-4);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i) EXPECT_NEAR(grad.f32()[r * cols + i], fused_grad.f32()[r * vocab + i], 1e-6);
    for (int64_t i = vocab; i < cols; ++i) EXPECT_EQ(grad.f32()[r * cols + i], 0.0f);  // padding
  }
}

TEST(Dispatch, MixedDevicesAndMissingBackendsAreRefusedByName) {
  // Views that claim to be on a CUDA device: the dispatcher refuses them before any
  // memory is touched (the pointers are never read).
  float junk[16];
  const TensorView gx(junk, DType::F32, {2, 8}, {8, 1}, Device::CUDA);
  const TensorView gw(junk, DType::F32, {8, 8}, {8, 1}, Device::CUDA);
  const TensorView gy(junk, DType::F32, {2, 8}, {8, 1}, Device::CUDA);
#ifndef OLMO2_HAVE_CUDA
  EXPECT_THAT(shape_error([&] { linear(gx, gw, gy); }), HasSubstr("ops::linear has no cuda implementation"));
#endif
  const Tensor cpu = Tensor::zeros({8, 8});
  EXPECT_THAT(shape_error([&] { linear(gx, cpu.view(), gy); }),
              HasSubstr("ops::linear: views on different devices (cuda and cpu)"));
  // Host code cannot read a device view's elements.
  EXPECT_THAT(shape_error([&] { (void)gx.f32(); }), HasSubstr("expected a cpu tensor, got a cuda one"));
}

}  // namespace
}  // namespace olmo2::ops
