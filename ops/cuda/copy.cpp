// CUDA copy (host ↔ device and on the device, with the f32 ↔ bf16 conversions) and fill
// (ops/tensor_ops.h; docs/architecture.md §2, memory and copies).
//
// Transfers. Host → device: a transfer of at most kStagingBytes (4 MiB: ids,
// positions, targets, small tensors) is first copied by the host into a pinned staging
// buffer (ops/cuda/pinned.h) and then DMA'd on the compute stream without waiting for
// it; the caller's memory is free on return either way. A larger one (weights at load)
// is copied from the caller's memory and waits for the stream, because cudaMemcpyAsync
// from pageable memory is only documented to be "possibly" synchronous. Device → host:
// cudaMemcpyAsync then a stream synchronize (the caller reads the result next); pinned
// staging would add a host copy there and save nothing. Conversions and strided layouts
// are done on the device by the strided kernels (ops/cuda/strided.h): the host only
// ever moves raw bytes of the source's dtype (a strided host view is first packed by
// ops::cpu::copy, a bit copy).
#include <cstring>
#include <optional>
#include <vector>

#include "core/error.h"
#include "ops/cpu/kernels.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/pinned.h"
#include "ops/cuda/runtime.h"
#include "ops/cuda/strided.h"

namespace olmo2::ops::cuda {
namespace {

/// Device scratch from the caching allocator, returned at scope exit (later work on the
/// compute stream is ordered after the work that uses it).
struct DeviceScratch {
  void* p;
  explicit DeviceScratch(size_t bytes) : p(bytes ? device_malloc(bytes) : nullptr) {}
  ~DeviceScratch() { device_free(p); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
};

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) s[k - 1] = s[k] * shape[k];
  return s;
}

void device_to_device(const TensorView& src, const TensorView& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    OLMO2_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice, compute_stream()));
    return;
  }
  launch_convert(src.data(), src.dtype(), dst.data(), dst.dtype(),
                 coalesce("copy", src.shape(), src.strides(), dst.strides()));
}

void host_to_device(const TensorView& src, const TensorView& dst) {
  const size_t bytes = src.bytes();
  // A contiguous host image of src in src's dtype: staged, the caller's own, or packed.
  std::optional<StagingBuffer> staging;
  Tensor packed;
  const void* image = src.data();
  if (bytes <= kStagingBytes) {
    staging.emplace();
    cpu::copy(src, TensorView(staging->data(), src.dtype(), src.shape(), Device::CPU));
    image = staging->data();
  } else if (!src.is_contiguous()) {
    packed = Tensor::zeros(src.shape(), src.dtype());
    cpu::copy(src, packed.view());
    image = packed.view().data();
  }
  // Straight into dst when it is a contiguous view of the same dtype, else into scratch
  // that the strided kernel converts and scatters into dst.
  const bool direct = src.dtype() == dst.dtype() && dst.is_contiguous();
  DeviceScratch scratch(direct ? 0 : bytes);
  void* target = direct ? dst.data() : scratch.p;
  OLMO2_CUDA_CHECK(cudaMemcpyAsync(target, image, bytes, cudaMemcpyHostToDevice, compute_stream()));
  if (staging) staging->release();
  else synchronize();  // the caller's memory (or `packed`) is read before we return
  if (!direct) {
    launch_convert(scratch.p, src.dtype(), dst.data(), dst.dtype(),
                   coalesce("copy", src.shape(), row_major_strides(src.shape()), dst.strides()));
  }
}

void device_to_host(const TensorView& src, const TensorView& dst) {
  const size_t bytes = dst.bytes();
  // A contiguous device image of src in dst's dtype: src itself, or converted scratch.
  const bool direct = src.dtype() == dst.dtype() && src.is_contiguous();
  DeviceScratch scratch(direct ? 0 : bytes);
  const void* image = direct ? src.data() : scratch.p;
  if (!direct) {
    launch_convert(src.data(), src.dtype(), scratch.p, dst.dtype(),
                   coalesce("copy", src.shape(), src.strides(), row_major_strides(src.shape())));
  }
  if (dst.is_contiguous()) {
    OLMO2_CUDA_CHECK(cudaMemcpyAsync(dst.data(), image, bytes, cudaMemcpyDeviceToHost, compute_stream()));
    synchronize();
    return;
  }
  Tensor host = Tensor::zeros(dst.shape(), dst.dtype());
  OLMO2_CUDA_CHECK(cudaMemcpyAsync(host.view().data(), image, bytes, cudaMemcpyDeviceToHost, compute_stream()));
  synchronize();
  cpu::copy(host.view(), dst);  // a bit copy into the strided host view
}

}  // namespace

void copy(const TensorView& src, const TensorView& dst) {
  OLMO2_CHECK(src.shape() == dst.shape(), "copy: ", src.shape_str(), " to ", dst.shape_str());
  const DType s = src.dtype(), d = dst.dtype();
  const bool floats = (s == DType::F32 || s == DType::BF16 || s == DType::F16) && (d == DType::F32 || d == DType::BF16);
  OLMO2_CHECK(s == d || floats, "copy: ", dtype_name(s), " to ", dtype_name(d), " is not a supported conversion");
  if (src.numel() == 0) return;
  const bool on_src = src.device() == Device::CUDA, on_dst = dst.device() == Device::CUDA;
  if (on_src && on_dst) return device_to_device(src, dst);
  if (on_dst) return host_to_device(src, dst);
  if (on_src) return device_to_host(src, dst);
  return cpu::copy(src, dst);
}

void fill(const TensorView& dst, double value) {
  OLMO2_CHECK(dst.device() == Device::CUDA, "cuda::fill on a ", device_name(dst.device()), " view");
  uint64_t bits = 0;
  switch (dst.dtype()) {
    case DType::F32: {
      const float v = static_cast<float>(value);
      uint32_t u;
      std::memcpy(&u, &v, 4);
      bits = u;
      break;
    }
    case DType::BF16: bits = f32_to_bf16(static_cast<float>(value)); break;
    case DType::F64: std::memcpy(&bits, &value, 8); break;
    case DType::I32: bits = static_cast<uint32_t>(static_cast<int32_t>(value)); break;
    case DType::I64: bits = static_cast<uint64_t>(static_cast<int64_t>(value)); break;
    case DType::U8: bits = static_cast<uint8_t>(value); break;
    case DType::F16: OLMO2_THROW(ShapeError, "fill: f16 is a load-only dtype");
  }
  if (dst.numel() == 0) return;
  launch_fill(dst.data(), dtype_size(dst.dtype()), bits, coalesce("fill", dst.shape(), dst.strides(), dst.strides()));
}

}  // namespace olmo2::ops::cuda
