// The CUDA gather_rows, scatter_rows, round_to, scale, sum_squares and sum_row_norms
// against the CPU ones (ops/tensor_ops.h), the caching allocator's reuse and the CUDA
// error text (ops/cuda/runtime.h, check.h). Row moves, rounding and scaling are exact,
// so they are compared byte for byte (the poisoned elements outside a view included);
// the fp64 reductions sum in a different order inside a chunk or row (a tree, not left
// to right), so they agree to 1e-12 relative (fp64 rounding of a few thousand
// additions is ~1e-13). Skips without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/tensor_ops.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/ops/cuda/glue_test_util.h"
#include "tests/ops/random_tensor.h"
#ifdef OLMO2_HAVE_CUDA
#include "ops/cuda/check.h"
#include "ops/cuda/runtime.h"
#endif

namespace olmo2::ops {
namespace {

using test::poisoned_host;
using test::random_host;
using test::view_into;

#ifdef OLMO2_HAVE_CUDA
/// gather (or scatter) rows of a random [R, W] base through `index`, the source and
/// destination views `pad` columns narrower than their bases (row-strided when pad > 0).
void expect_rows_like_cpu(bool scatter, DType t, int64_t R, int64_t n, int64_t W, int64_t pad,
                          const std::vector<int32_t>& index) {
  SCOPED_TRACE(std::string(scatter ? "scatter" : "gather") + " " + dtype_name(t) + " R " + std::to_string(R) +
               " n " + std::to_string(n) + " W " + std::to_string(W) + " pad " + std::to_string(pad));
  const int64_t src_rows = scatter ? n : R, dst_rows = scatter ? R : n;
  const Tensor src = random_host({src_rows, W + pad}, t, 3);
  const std::vector<int64_t> src_shape = {src_rows, W}, dst_shape = {dst_rows, W};
  const std::vector<int64_t> src_strides = {W + pad, 1}, dst_strides = {W + pad, 1};
  Tensor ix_host = Tensor::zeros({n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) ix_host.i32()[i] = index[static_cast<size_t>(i)];
  Tensor want = poisoned_host({dst_rows, W + pad}, t);
  auto run = [&](auto op, const Tensor& s, const Tensor& ix, const Tensor& d) {
    op(view_into(s, src_shape, src_strides, pad), ix.view(), view_into(d, dst_shape, dst_strides, pad));
  };
  const Tensor dev_src = test::upload(src.view()), dev_ix = test::upload(ix_host.view());
  const Tensor dev_dst = test::upload(poisoned_host({dst_rows, W + pad}, t).view());
  if (scatter) {
    run(cpu::scatter_rows, src, ix_host, want);
    run(ops::scatter_rows, dev_src, dev_ix, dev_dst);
  } else {
    run(cpu::gather_rows, src, ix_host, want);
    run(ops::gather_rows, dev_src, dev_ix, dev_dst);
  }
  test::expect_same_bytes(want, test::to_host(dev_dst.view()), scatter ? "scatter_rows" : "gather_rows");
}
#endif

TEST(CudaTensorOps, GatherAndScatterRowsMatchCpu) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  for (DType t : {DType::F32, DType::BF16, DType::I32, DType::U8}) {
    for (int64_t W : {1, 3, 37, 1000}) {
      for (int64_t pad : {0, 5}) {
        expect_rows_like_cpu(false, t, 40, 3, W, pad, {39, 0, 39});  // gathers may repeat rows
        expect_rows_like_cpu(false, t, 1, 1, W, pad, {0});
        expect_rows_like_cpu(true, t, 40, 4, W, pad, {7, 0, 39, 12});  // scatters are distinct
        expect_rows_like_cpu(true, t, 3, 3, W, pad, {2, 0, 1});
      }
    }
  }
#endif
}

TEST(CudaTensorOps, BadRowIndexGivesTheCpuError) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  const Tensor src = random_host({5, 4}, DType::F32, 1), dst = Tensor::zeros({2, 4});
  const std::vector<int32_t> bad = {1, 5};
  Tensor ix = Tensor::zeros({2}, DType::I32);
  ix.i32()[0] = bad[0], ix.i32()[1] = bad[1];
  const Tensor dsrc = test::upload(src.view()), ddst = test::upload(dst.view()), dix = test::upload(ix.view());
  const std::string want = test::error_text<ShapeError>([&] { cpu::gather_rows(src.view(), ix.view(), dst.view()); });
  EXPECT_THAT(want, ::testing::HasSubstr("index 5 at 1 is outside [0, 5)"));
  EXPECT_EQ(test::error_text<ShapeError>([&] { gather_rows(dsrc.view(), dix.view(), ddst.view()); }), want);
  // Scattering 2 rows into 4: index 5 is outside [0, 4).
  const Tensor rows = Tensor::zeros({2, 4}), four = Tensor::zeros({4, 4});
  const Tensor drows = test::upload(rows.view()), dfour = test::upload(four.view());
  EXPECT_EQ(test::error_text<ShapeError>([&] { scatter_rows(drows.view(), dix.view(), dfour.view()); }),
            test::error_text<ShapeError>([&] { cpu::scatter_rows(rows.view(), ix.view(), four.view()); }));
  // A repeated destination row would be a race between two blocks: refused, as on the CPU.
  ix.i32()[0] = 3, ix.i32()[1] = 3;
  const Tensor dtwice = test::upload(ix.view());
  const std::string repeated = test::error_text<ShapeError>([&] { cpu::scatter_rows(rows.view(), ix.view(), four.view()); });
  EXPECT_THAT(repeated, ::testing::HasSubstr("index 3 at 1 repeats the one at 0"));
  EXPECT_EQ(test::error_text<ShapeError>([&] { scatter_rows(drows.view(), dtwice.view(), dfour.view()); }), repeated);
#endif
}

TEST(CudaTensorOps, RoundToBf16MatchesCpuBitForBit) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  struct Case {
    std::vector<int64_t> base, shape, strides;
    int64_t offset;
  };
  const std::vector<Case> cases = {{{1}, {1}, {}, 0}, {{3}, {3}, {}, 0}, {{37, 1000}, {37, 1000}, {}, 0},
                                   {{37, 1000}, {37, 990}, {1000, 1}, 4}};
  for (const Case& c : cases) {
    SCOPED_TRACE("shape " + shape_to_string(c.shape));
    Tensor want = random_host(c.base, DType::F32, 5);
    const Tensor dev = test::upload(want.view());
    cpu::round_to(view_into(want, c.shape, c.strides, c.offset), DType::BF16);
    round_to(view_into(dev, c.shape, c.strides, c.offset), DType::BF16);
    test::expect_same_bytes(want, test::to_host(dev.view()), "round_to");
    round_to(view_into(dev, c.shape, c.strides, c.offset), DType::F32);  // nothing to do
    test::expect_same_bytes(want, test::to_host(dev.view()), "round_to f32");
  }
  const Tensor h = Tensor::zeros({4, 4}), d = test::upload(h.view());
  const TensorView ht(h.view().data(), DType::F32, {4, 4}, {1, 4}, Device::CPU);
  const TensorView dt(d.view().data(), DType::F32, {4, 4}, {1, 4}, Device::CUDA);
  EXPECT_EQ(test::error_text<ShapeError>([&] { round_to(dt, DType::BF16); }),
            test::error_text<ShapeError>([&] { cpu::round_to(ht, DType::BF16); }));
  EXPECT_EQ(test::error_text<ShapeError>([&] { round_to(d.view(), DType::F16); }),
            test::error_text<ShapeError>([&] { cpu::round_to(h.view(), DType::F16); }));
  const Tensor b = Tensor::zeros({4}, DType::BF16, Device::CUDA);
  EXPECT_THROW(round_to(b.view(), DType::BF16), ShapeError);
#endif
}

TEST(CudaTensorOps, ScaleMatchesCpuBitForBit) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{1}, {3}, {37, 1000}}) {
    SCOPED_TRACE("shape " + shape_to_string(shape));
    Tensor want = random_host(shape, DType::F32, 9);
    const Tensor dev = test::upload(want.view());
    cpu::scale(want.view(), -0.37f);
    scale(dev.view(), -0.37f);
    test::expect_same_bytes(want, test::to_host(dev.view()), "scale");
  }
  const Tensor d = Tensor::zeros({4, 8}, DType::F32, Device::CUDA);
  EXPECT_THROW(scale(view_into(d, {4, 4}, {8, 1}), 2.0f), ShapeError);
#endif
}

TEST(CudaTensorOps, SumSquaresAndRowNormsMatchCpu) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  for (int64_t n : {1, 3, 37, 1000, 16384, 16385, 300000}) {  // (an empty view dispatches to the CPU)
    SCOPED_TRACE("sum_squares n " + std::to_string(n));
    const Tensor h = test::random_tensor({n}, 11), d = test::upload(h.view());
    const double want = cpu::sum_squares(h.view(), 0.25), got = sum_squares(d.view(), 0.25);
    EXPECT_NEAR(got, want, 1e-12 * std::fabs(want));
  }
  struct Case {
    std::vector<int64_t> base, shape;
  };
  for (const Case& c : std::vector<Case>{{{1, 1}, {1, 1}}, {{3, 37}, {3, 37}}, {{37, 1000}, {37, 1000}},
                                         {{4, 50304}, {4, 50304}}, {{37, 1000}, {37, 977}}}) {
    SCOPED_TRACE("sum_row_norms " + shape_to_string(c.shape));
    const Tensor h = test::random_tensor(c.base, 12), d = test::upload(h.view());
    const std::vector<int64_t> strides = {c.base[1], 1};
    const double want = cpu::sum_row_norms(view_into(h, c.shape, strides));
    EXPECT_NEAR(sum_row_norms(view_into(d, c.shape, strides)), want, 1e-12 * std::fabs(want));
  }
  const Tensor d = Tensor::zeros({4, 8}, DType::F32, Device::CUDA);
  EXPECT_THROW(sum_squares(view_into(d, {4, 4}, {8, 1}), 0.0), ShapeError);
  EXPECT_THROW(sum_row_norms(TensorView(d.view().data(), DType::F32, {4, 4}, {1, 8}, Device::CUDA)), ShapeError);
#endif
}

TEST(CudaRuntime, CachingAllocatorReusesAFreedBlock) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  const size_t bytes = (size_t{3} << 20) + 17;  // rounded up to 512 bytes, from a 20 MiB segment
  // Earlier tests may have left blocks in the cache, and a request takes the best fit,
  // not necessarily `a`'s: start from an empty cache.
  cuda::release_cached_memory();
  void* a = cuda::device_malloc(bytes);
  cuda::device_free(a);
  const cuda::AllocatorStats before = cuda::allocator_stats();
  void* b = cuda::device_malloc(bytes);
  const cuda::AllocatorStats after = cuda::allocator_stats();
  EXPECT_EQ(after.cuda_malloc_calls, before.cuda_malloc_calls);
  EXPECT_EQ(b, a);
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes + (size_t{3} << 20) + 512);
  cuda::device_free(b);
  {  // the same through Buffer: a tensor of the same size after one is freed
    Tensor t = Tensor::zeros({1000, 1000}, DType::F32, Device::CUDA);
  }
  const size_t calls = cuda::allocator_stats().cuda_malloc_calls;
  Tensor again = Tensor::zeros({1000, 1000}, DType::F32, Device::CUDA);
  EXPECT_EQ(cuda::allocator_stats().cuda_malloc_calls, calls);
#endif
}

// The current device is per thread in CUDA: a thread the process starts later (an HTTP
// worker, a watchdog) must still allocate and launch on the process's GPU. Needs two GPUs
// (on one, every thread's default is the right one).
TEST(CudaRuntime, AnotherThreadWorksOnTheProcessGpu) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs to tell the process's from the default (not on this machine)";
  // The allocator's cache is per process and assumes one GPU: empty it around the switch.
  cuda::release_cached_memory();
  cuda::use_device(1);
  int seen = -1, pointer_device = -1;
  std::thread worker([&] {
    Tensor t = Tensor::zeros({256}, DType::F32, Device::CUDA);  // allocates and launches a fill
    cudaGetDevice(&seen);
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, t.view().data()) == cudaSuccess) pointer_device = attr.device;
    cuda::synchronize();
  });
  worker.join();
  cuda::release_cached_memory();
  cuda::use_device(0);
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(pointer_device, 1);
#endif
}

TEST(CudaRuntime, ErrorNamesTheCallAndTheFile) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  try {
    OLMO2_CUDA_CHECK(cudaSetDevice(9999));
    ADD_FAILURE() << "cudaSetDevice(9999) did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cudaSetDevice(9999)"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("test_tensor_ops.cpp"));
  }
  cudaGetLastError();  // the failed call leaves no sticky error; clear the last-error slot
#endif
}

}  // namespace
}  // namespace olmo2::ops
