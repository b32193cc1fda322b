// The CUDA ops::copy (host → device, device → host, device → device; every conversion;
// contiguous, row-strided, transposed and 3-d strided views; the staged and the large
// paths) and ops::fill against the CPU ones, byte for byte: the conversions are exact
// functions of the bits (ops/dtype.h), so the GPU must reproduce them exactly, and the
// elements outside a view (poisoned) must stay untouched. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/tensor_ops.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/ops/cuda/glue_test_util.h"

namespace olmo2::ops {
namespace {

using test::poisoned_host;
using test::random_host;
using test::view_into;

#ifdef OLMO2_HAVE_CUDA
/// Where a view lies in its base: the base's shape, the view's strides (row-major when
/// empty) and its offset in elements.
struct Placement {
  std::vector<int64_t> base;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

enum class Direction { HostToDevice, DeviceToHost, DeviceToDevice };
const char* direction_name(Direction d) {
  return d == Direction::HostToDevice ? "host to device" : d == Direction::DeviceToHost ? "device to host" : "device to device";
}

/// ops::copy of a `shape` view of a random source base into a view of a poisoned
/// destination base, in direction `dir`, against ops::cpu::copy on host copies of the
/// same bases: the whole destination base must match byte for byte.
void expect_copy_like_cpu(DType s, DType d, const std::vector<int64_t>& shape, const Placement& from,
                          const Placement& to, Direction dir) {
  SCOPED_TRACE(std::string(dtype_name(s)) + " to " + dtype_name(d) + ", " + direction_name(dir) + ", shape " +
               shape_to_string(shape));
  const Tensor src = random_host(from.base, s, 7);
  Tensor want = poisoned_host(to.base, d);
  cpu::copy(view_into(src, shape, from.strides, from.offset), view_into(want, shape, to.strides, to.offset));
  Tensor got;
  if (dir == Direction::HostToDevice) {
    Tensor dst = test::upload(poisoned_host(to.base, d).view());
    copy(view_into(src, shape, from.strides, from.offset), view_into(dst, shape, to.strides, to.offset));
    got = test::to_host(dst.view());
  } else if (dir == Direction::DeviceToHost) {
    const Tensor dev_src = test::upload(src.view());
    got = poisoned_host(to.base, d);
    copy(view_into(dev_src, shape, from.strides, from.offset), view_into(got, shape, to.strides, to.offset));
  } else {
    const Tensor dev_src = test::upload(src.view());
    Tensor dst = test::upload(poisoned_host(to.base, d).view());
    copy(view_into(dev_src, shape, from.strides, from.offset), view_into(dst, shape, to.strides, to.offset));
    got = test::to_host(dst.view());
  }
  test::expect_same_bytes(want, got, "copy");
}

const std::vector<std::pair<DType, DType>> kFloatPairs = {
    {DType::F32, DType::F32},  {DType::F32, DType::BF16}, {DType::BF16, DType::F32},
    {DType::BF16, DType::BF16}, {DType::F16, DType::F32},  {DType::F16, DType::BF16}};
const Direction kDirections[] = {Direction::HostToDevice, Direction::DeviceToHost, Direction::DeviceToDevice};
#endif

TEST(CudaCopy, ContiguousEveryConversionAndDirectionMatchesCpu) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  const std::vector<std::vector<int64_t>> shapes = {{1}, {3}, {37}, {1000}, {37, 1000}, {2, 3, 5}, {0, 5}};
  for (const auto& [s, d] : kFloatPairs) {
    for (const auto& shape : shapes) {
      for (Direction dir : kDirections) expect_copy_like_cpu(s, d, shape, {shape, {}, 0}, {shape, {}, 0}, dir);
    }
  }
  for (DType t : {DType::I32, DType::I64, DType::F64, DType::U8}) {  // bit copies of the other dtypes
    for (Direction dir : kDirections) expect_copy_like_cpu(t, t, {37, 3}, {{37, 3}, {}, 0}, {{37, 3}, {}, 0}, dir);
  }
#endif
}

TEST(CudaCopy, LargerThanTheStagingBufferMatchesCpu) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  // 4.8 MB of f32: past the 4 MiB pinned staging buffer (the synchronous path), in
  // both directions, converting and not; and a strided host source of 4.4 MB (packed
  // on the host, then converted on the device).
  const std::vector<int64_t> big = {1200, 1000};
  for (DType d : {DType::F32, DType::BF16}) {
    for (Direction dir : kDirections) expect_copy_like_cpu(DType::F32, d, big, {big, {}, 0}, {big, {}, 0}, dir);
  }
  const std::vector<int64_t> shape = {1100, 1000};
  const Placement wide{{1100, 1024}, {1024, 1}, 5};
  for (DType d : {DType::F32, DType::BF16}) {
    expect_copy_like_cpu(DType::F32, d, shape, wide, {shape, {}, 0}, Direction::HostToDevice);
    expect_copy_like_cpu(DType::F32, d, shape, {shape, {}, 0}, wide, Direction::DeviceToHost);
  }
#endif
}

TEST(CudaCopy, StridedViewsMatchCpu) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  struct Case {
    std::vector<int64_t> shape;
    Placement from, to;
  };
  const std::vector<Case> cases = {
      // Row-strided 2-d views on both sides (a column block of a wider tensor).
      {{37, 100}, {{37, 130}, {130, 1}, 7}, {{40, 120}, {120, 1}, 3}},
      {{3, 1}, {{3, 4}, {4, 1}, 3}, {{3, 1}, {}, 0}},
      // A transposed destination (no dimension contiguous in both).
      {{5, 9}, {{5, 9}, {}, 0}, {{9, 5}, {1, 5}, 0}},
      // A column: 1-d with a stride.
      {{37}, {{37, 3}, {3}, 2}, {{37}, {}, 0}},
      // 3-d with gaps in two dimensions.
      {{3, 4, 5}, {{3, 8, 6}, {48, 6, 1}, 1}, {{3, 4, 5}, {}, 0}},
      {{3, 4, 5}, {{3, 4, 5}, {}, 0}, {{4, 5, 7}, {35, 7, 1}, 2}},
  };
  for (const Case& c : cases) {
    for (const auto& [s, d] : kFloatPairs) {
      for (Direction dir : kDirections) expect_copy_like_cpu(s, d, c.shape, c.from, c.to, dir);
    }
  }
#endif
}

TEST(CudaCopy, RefusesWhatTheCpuRefuses) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  const Tensor dev_f32 = Tensor::zeros({3, 4}, DType::F32, Device::CUDA);
  const Tensor dev_i32 = Tensor::zeros({3, 4}, DType::I32, Device::CUDA);
  const Tensor dev_short = Tensor::zeros({3, 5}, DType::F32, Device::CUDA);
  const Tensor host_f32 = Tensor::zeros({3, 4}, DType::F32), host_i32 = Tensor::zeros({3, 4}, DType::I32);
  const Tensor host_short = Tensor::zeros({3, 5}, DType::F32);
  EXPECT_EQ(test::error_text<ShapeError>([&] { copy(dev_i32.view(), dev_f32.view()); }),
            test::error_text<ShapeError>([&] { cpu::copy(host_i32.view(), host_f32.view()); }));
  EXPECT_EQ(test::error_text<ShapeError>([&] { copy(host_f32.view(), dev_short.view()); }),
            test::error_text<ShapeError>([&] { cpu::copy(host_f32.view(), host_short.view()); }));
#endif
}

TEST(CudaFill, EveryDtypeContiguousAndStridedMatchesCpu) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  for (DType t : {DType::F32, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8}) {
    for (double value : {1.7, -3.25, 0.0}) {
      for (bool strided : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + (strided ? " strided" : " contiguous") + " value " +
                     std::to_string(value));
        const std::vector<int64_t> base = {7, 40};
        const std::vector<int64_t> shape = strided ? std::vector<int64_t>{7, 34} : base;
        const std::vector<int64_t> strides = strided ? std::vector<int64_t>{40, 1} : std::vector<int64_t>{};
        Tensor want = poisoned_host(base, t);
        cpu::fill(view_into(want, shape, strides, strided ? 3 : 0), value);
        Tensor dev = test::upload(poisoned_host(base, t).view());
        fill(view_into(dev, shape, strides, strided ? 3 : 0), value);
        test::expect_same_bytes(want, test::to_host(dev.view()), "fill");
      }
    }
  }
  const Tensor f16 = Tensor::zeros({3}, DType::F16, Device::CUDA);
  EXPECT_THROW(fill(f16.view(), 1.0), ShapeError);
#endif
}

}  // namespace
}  // namespace olmo2::ops
