// The CUDA cross-entropy + Z-loss (fused), check_targets and the three vocab-parallel
// steps against the CPU ops (ops/backward.h). Skips without a GPU.
//
// Tolerances. The GPU takes expf where the CPU takes its fast_exp (each ≈2 ulp), and sums
// the exponentials as an fp64 tree where the fused CPU op adds fp32 blocks of 256 into
// fp64. Loss sums: within 1e-5 of their magnitude (a sum over rows of the per-row
// errors below). dlogits, exponentials: per element, from the error analysis in
// tests/ops/attention_bounds.h (cross_entropy_dlogits: each softmax value carries its
// exp's error, u·|x − max|, and the sum's relative error; the target's entry also the
// subtraction of 1), each backend within its bound of the exact value. The vocab-parallel
// partials (fp64 sums on both sides: only the exp differs) within 1e-5; row maxima and
// the target logits exactly; the finishing step, given identical inputs, within 1e-9
// (only fp64 log differs) for the sums, and per element 3u of |coef·e| for dlogits (the
// coefficient rounded to fp32 from fp64 values that may differ in the last bit, the
// product, the target's subtraction).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/backward.h"
#include "ops/cpu/kernels.h"
#include "tests/ops/attention_bounds.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/ops/cuda/glue_test_util.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {
namespace {

#ifdef OLMO2_HAVE_CUDA
/// T targets in [0, vocab), every fifth row (from the second) ignored.
Tensor make_targets(int64_t T, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::zeros({T}, DType::I32);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < T; ++i) {
    t.i32()[i] = i % 5 == 1 ? kIgnoreIndex : static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  }
  return t;
}

void expect_sums_near(const CrossEntropySums& want, const CrossEntropySums& got, double rel) {
  EXPECT_EQ(got.count, want.count);
  EXPECT_NEAR(got.ce_sum, want.ce_sum, rel * std::max(1.0, std::fabs(want.ce_sum)));
  EXPECT_NEAR(got.z_sq_sum, want.z_sq_sum, rel * std::max(1.0, std::fabs(want.z_sq_sum)));
}

enum class Grad { None, Separate, InPlace };

std::vector<int32_t> ids_of(const Tensor& t) { return std::vector<int32_t>(t.i32(), t.i32() + t.numel()); }

// Bounds between the backends for exp(x − max[t]) over the first `real` of the L columns
// of x [T, L]: each exp within 2 ulp (4u) plus the fp32 subtraction (u·|x − max|); the
// other columns must match exactly.
std::vector<double> exp_bounds(const Tensor& x, const Tensor& row_max, int64_t real, const Tensor& want) {
  const int64_t T = x.shape()[0], L = x.shape()[1];
  std::vector<double> b(static_cast<size_t>(want.numel()), 0.0);
  const int64_t w = want.shape()[1];
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < std::min(real, w); ++i) {
      const double d = std::fabs(double(x.f32()[t * L + i]) - row_max.f32()[t]);
      b[static_cast<size_t>(t * w + i)] = 2 * test::kU * (5 + d) * std::fabs(double(want.f32()[t * w + i]));
    }
  return b;
}
#endif

TEST(CudaLoss, CrossEntropyZLossMatchesCpu) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  const float z_coef = 1e-4f;
  for (auto [T, V] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 3}, {37, 37}, {37, 1000}, {3, 50304},
                                                              {37, 50304}}) {
    for (Grad g : {Grad::None, Grad::Separate, Grad::InPlace}) {
      SCOPED_TRACE("T " + std::to_string(T) + " V " + std::to_string(V) + " grad " + std::to_string(int(g)));
      Tensor x = test::random_tensor({T, V}, 21, 3.0f);
      const Tensor tg = make_targets(T, V, 22);
      const Tensor dx_dev = test::upload(x.view()), dtg = test::upload(tg.view());
      Tensor dlog = Tensor::zeros({T, V}), dlog_dev = Tensor::zeros({T, V}, DType::F32, Device::CUDA);
      test::poison(dlog_dev.view());
      const float scale = 1.0f / static_cast<float>(std::max<int64_t>(1, T - (T + 3) / 5));
      const TensorView cpu_d = g == Grad::None ? TensorView() : g == Grad::InPlace ? x.view() : dlog.view();
      const TensorView gpu_d = g == Grad::None ? TensorView() : g == Grad::InPlace ? dx_dev.view() : dlog_dev.view();
      const test::Expected e =
          test::cross_entropy_dlogits(test::dense(x.view()), ids_of(tg), V, z_coef, scale, kIgnoreIndex);
      const CrossEntropySums want = cpu::cross_entropy_zloss(x.view(), tg.view(), z_coef, scale, cpu_d);
      const CrossEntropySums got = cross_entropy_zloss(dx_dev.view(), dtg.view(), z_coef, scale, gpu_d);
      expect_sums_near(want, got, 1e-5);
      if (g != Grad::None) test::expect_close(cpu_d, test::to_host(gpu_d).view(), e.between_two(), "dlogits");
    }
  }
#endif
}

TEST(CudaLoss, BadTargetGivesTheCpuErrorBeforeAnyWrite) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  const int64_t T = 4, V = 10;
  const Tensor x = test::random_tensor({T, V}, 1), dx = Tensor::zeros({T, V});
  const Tensor dev_x = test::upload(x.view());
  const Tensor dev_dx = Tensor::zeros({T, V}, DType::F32, Device::CUDA);
  for (int32_t bad : {10, -5, 1 << 30}) {
    SCOPED_TRACE("bad target " + std::to_string(bad));
    Tensor tg = make_targets(T, V, 3);
    tg.i32()[2] = bad;
    const Tensor dev_tg = test::upload(tg.view());
    test::poison(dev_dx.view());
    const std::string want = test::error_text<InputError>([&] { cpu::check_targets(tg.view(), V); });
    EXPECT_THAT(want, ::testing::HasSubstr("at row 2"));
    EXPECT_EQ(test::error_text<InputError>([&] { check_targets(dev_tg.view(), V); }), want);
    EXPECT_EQ(test::error_text<InputError>([&] { cpu::cross_entropy_zloss(x.view(), tg.view(), 0, 1, dx.view()); }),
              test::error_text<InputError>(
                  [&] { cross_entropy_zloss(dev_x.view(), dev_tg.view(), 0, 1, dev_dx.view()); }));
    const Tensor after = test::to_host(dev_dx.view());  // still all 0xff: nothing written
    const auto* b = static_cast<const unsigned char*>(after.view().data());
    EXPECT_TRUE(std::all_of(b, b + after.view().bytes(), [](unsigned char c) { return c == 0xff; }));
  }
  const Tensor bf16 = Tensor::zeros({T, V}, DType::BF16, Device::CUDA), dev_tg = test::upload(make_targets(T, V, 3).view());
  EXPECT_THROW(cross_entropy_zloss(bf16.view(), dev_tg.view(), 0, 1, TensorView()), ShapeError);  // f32 only, as the CPU
#endif
}

TEST(CudaLoss, VocabParallelStepsMatchCpu) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  const float z_coef = 1e-4f, scale = 1.0f / 29;
  for (int64_t V : {int64_t{1001}, int64_t{50303}}) {  // two shards, the second with a padding column
    const int64_t T = 37, L = (V + 1) / 2;
    SCOPED_TRACE("V " + std::to_string(V));
    const Tensor tg = make_targets(T, V, 31), dev_tg = test::upload(tg.view());
    std::vector<Tensor> x, dev_x;
    std::vector<int64_t> begin, real;
    Tensor global_max = Tensor::zeros({T});
    std::fill(global_max.f32(), global_max.f32() + T, -INFINITY);
    for (int r = 0; r < 2; ++r) {  // step 1: the row maxima, exactly
      begin.push_back(r * L), real.push_back(std::min(L, V - r * L));
      x.push_back(test::random_tensor({T, L}, 40 + r, 3.0f));
      dev_x.push_back(test::upload(x.back().view()));
      Tensor mx = Tensor::zeros({T}), dev_mx = Tensor::zeros({T}, DType::F32, Device::CUDA);
      cpu::vocab_parallel_ce_row_max(x.back().view(), real.back(), mx.view());
      vocab_parallel_ce_row_max(dev_x.back().view(), real.back(), dev_mx.view());
      test::expect_same_bytes(mx, test::to_host(dev_mx.view()), "row_max");
      for (int64_t t = 0; t < T; ++t) global_max.f32()[t] = std::max(global_max.f32()[t], mx.f32()[t]);
    }
    const Tensor dev_max = test::upload(global_max.view());
    Tensor stats_sum = Tensor::zeros({T, 2});
    std::vector<Tensor> e;  // the CPU's exponentials, the input of both finishing steps
    for (int r = 0; r < 2; ++r) {  // step 2: the partial sums and exponentials
      SCOPED_TRACE("shard " + std::to_string(r));
      Tensor stats = Tensor::zeros({T, 2}), dev_stats = Tensor::zeros({T, 2}, DType::F32, Device::CUDA);
      e.push_back(Tensor::zeros({T, L}));
      const Tensor dev_e = Tensor::zeros({T, L}, DType::F32, Device::CUDA);
      cpu::vocab_parallel_ce_partials(x[r].view(), real[r], begin[r], tg.view(), global_max.view(), stats.view(),
                                      e[r].view());
      vocab_parallel_ce_partials(dev_x[r].view(), real[r], begin[r], dev_tg.view(), dev_max.view(), dev_stats.view(),
                                 dev_e.view());
      test::expect_close(e[r].view(), test::to_host(dev_e.view()).view(), exp_bounds(x[r], global_max, real[r], e[r]),
                         "exponentials");
      const Tensor got = test::to_host(dev_stats.view());
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_NEAR(got.f32()[2 * t], stats.f32()[2 * t], 1e-5 * stats.f32()[2 * t]) << "row " << t;
        EXPECT_EQ(got.f32()[2 * t + 1], stats.f32()[2 * t + 1]) << "row " << t;
        stats_sum.f32()[2 * t] += stats.f32()[2 * t], stats_sum.f32()[2 * t + 1] += stats.f32()[2 * t + 1];
      }
      // In place (dlogits aliasing logits) gives the same as separate.
      const Tensor in_place = test::upload(x[r].view());
      vocab_parallel_ce_partials(in_place.view(), real[r], begin[r], dev_tg.view(), dev_max.view(), dev_stats.view(),
                                 in_place.view());
      const Tensor ip = test::to_host(in_place.view());
      const TensorView ip_real(ip.view().data(), DType::F32, {T, real[r]}, {L, 1}, Device::CPU);
      const TensorView e_real(e[r].view().data(), DType::F32, {T, real[r]}, {L, 1}, Device::CPU);
      Tensor a = Tensor::zeros({T, real[r]}), b = Tensor::zeros({T, real[r]});
      cpu::copy(ip_real, a.view()), cpu::copy(e_real, b.view());
      test::expect_close(b.view(), a.view(), exp_bounds(x[r], global_max, real[r], b), "exponentials in place");
      EXPECT_EQ(test::to_host(dev_stats.view()).f32()[1], stats.f32()[1]);
    }
    const Tensor dev_stats_sum = test::upload(stats_sum.view());
    CrossEntropySums want_total, got_total;
    for (int r = 0; r < 2; ++r) {  // step 3: from identical inputs (the CPU's stats and exponentials)
      SCOPED_TRACE("finish shard " + std::to_string(r));
      const Tensor dev_e = test::upload(e[r].view());
      const CrossEntropySums want = cpu::vocab_parallel_ce_finish(global_max.view(), stats_sum.view(), tg.view(),
                                                                  begin[r], real[r], z_coef, scale, e[r].view());
      const CrossEntropySums got = vocab_parallel_ce_finish(dev_max.view(), dev_stats_sum.view(), dev_tg.view(),
                                                            begin[r], real[r], z_coef, scale, dev_e.view());
      expect_sums_near(want, got, 1e-9);
      std::vector<double> bound(static_cast<size_t>(T * L), 0.0);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < real[r]; ++i) {
          const bool at_target = tg.i32()[t] == begin[r] + i;
          bound[static_cast<size_t>(t * L + i)] =
              2 * 3 * test::kU * (std::fabs(double(e[r].f32()[t * L + i])) + (at_target ? scale : 0.0));
        }
      test::expect_close(e[r].view(), test::to_host(dev_e.view()).view(), bound, "dlogits");
      const CrossEntropySums no_grad = vocab_parallel_ce_finish(dev_max.view(), dev_stats_sum.view(), dev_tg.view(),
                                                                begin[r], real[r], z_coef, scale, TensorView());
      expect_sums_near(want, no_grad, 1e-9);
    }
  }
#endif
}

}  // namespace
}  // namespace olmo2::ops
