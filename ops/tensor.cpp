#include "ops/tensor.h"

#include "ops/device_emulation.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#ifdef OLMO2_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/check.h"
#include "ops/cuda/runtime.h"
#endif

namespace olmo2 {

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  void* p = nullptr;
  // Host memory for the CPU, and for Device::CUDA under emulation (ops/device_emulation.h).
  if (device == Device::CPU || ops::device_emulated()) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    p = std::aligned_alloc(64, rounded);
    if (!p) OLMO2_THROW(Error, "out of host memory allocating ", bytes, " bytes");
    std::memset(p, 0, rounded);
  } else {
#ifdef OLMO2_HAVE_CUDA
    // The caching allocator (no cudaMalloc in a step loop); zero-filled on the compute
    // stream, so every later op on that stream sees zeros.
    p = ops::cuda::device_malloc(bytes);
    try {
      OLMO2_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ops::cuda::compute_stream()));
    } catch (...) {
      ops::cuda::device_free(p);
      throw;
    }
#else
    OLMO2_THROW(Error, "this build has no CUDA backend");
#endif
  }
  ptr_ = std::unique_ptr<void, Free>(p, Free{device});
}

void Buffer::Free::operator()(void* p) const {
  if (!p) return;
  if (device == Device::CPU || ops::device_emulated()) {
    std::free(p);
  } else {
#ifdef OLMO2_HAVE_CUDA
    ops::cuda::device_free(p);
#endif
  }
}

static std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

TensorView::TensorView(void* data, DType dtype, std::vector<int64_t> shape, Device device)
    : data_(data), dtype_(dtype), device_(device), shape_(std::move(shape)) {
  for (int64_t d : shape_) OLMO2_CHECK(d >= 0, "negative dimension in ", shape_str());
  strides_ = contiguous_strides(shape_);
}

TensorView::TensorView(void* data, DType dtype, std::vector<int64_t> shape,
                       std::vector<int64_t> strides, Device device)
    : data_(data), dtype_(dtype), device_(device), shape_(std::move(shape)),
      strides_(std::move(strides)) {
  OLMO2_CHECK(shape_.size() == strides_.size(), "shape ", shape_str(), " has ",
              shape_.size(), " dims but ", strides_.size(), " strides");
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool TensorView::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

void TensorView::check_host(DType want) const {
  OLMO2_CHECK(dtype_ == want, "expected a ", dtype_name(want), " tensor, got ", dtype_name(dtype_), " ",
              shape_str());
  OLMO2_CHECK(device_ == Device::CPU, "expected a cpu tensor, got a ", device_name(device_), " one ",
              shape_str());
}

TensorView TensorView::rows(int64_t begin, int64_t end) const {
  OLMO2_CHECK(dim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows [", begin,
              ", ", end, ") of ", shape_str());
  std::vector<int64_t> shape = shape_;
  shape[0] = end - begin;
  auto* base = static_cast<char*>(data_) +
               static_cast<ptrdiff_t>(begin * strides_[0]) * static_cast<ptrdiff_t>(dtype_size(dtype_));
  return TensorView(base, dtype_, std::move(shape), strides_, device_);
}

TensorView TensorView::cols(int64_t begin, int64_t end) const {
  OLMO2_CHECK(dim() == 2 && 0 <= begin && begin <= end && end <= shape_[1], "cols [", begin, ", ", end, ") of ",
              shape_str());
  auto* base = static_cast<char*>(data_) +
               static_cast<ptrdiff_t>(begin * strides_[1]) * static_cast<ptrdiff_t>(dtype_size(dtype_));
  return TensorView(base, dtype_, {shape_[0], end - begin}, strides_, device_);
}

TensorView TensorView::col(int64_t c) const {
  OLMO2_CHECK(dim() == 2 && 0 <= c && c < shape_[1], "column ", c, " of ", shape_str());
  auto* base = static_cast<char*>(data_) +
               static_cast<ptrdiff_t>(c * strides_[1]) * static_cast<ptrdiff_t>(dtype_size(dtype_));
  return TensorView(base, dtype_, {shape_[0]}, {strides_[0]}, device_);
}

TensorView TensorView::reshape(std::vector<int64_t> shape) const {
  OLMO2_CHECK(is_contiguous(), "reshape of a non-contiguous view ", shape_str());
  TensorView out(data_, dtype_, std::move(shape), device_);
  OLMO2_CHECK(out.numel() == numel(), "reshape ", shape_str(), " to ", out.shape_str());
  return out;
}

std::string TensorView::shape_str() const { return shape_to_string(shape_); }

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype, Device device) {
  Tensor t;
  int64_t n = 1;
  for (int64_t d : shape) {
    OLMO2_CHECK(d >= 0, "negative dimension in ", shape_to_string(shape));
    n *= d;
  }
  t.buffer_ = Buffer(static_cast<size_t>(n) * dtype_size(dtype), device);
  t.view_ = TensorView(t.buffer_.data(), dtype, std::move(shape), device);
  return t;
}

}  // namespace olmo2
