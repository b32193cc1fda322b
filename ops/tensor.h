// Owning buffer and non-owning tensor view (dtype, device, shape, strides).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#if __cplusplus >= 202002L
#include <span>
#endif
#include <type_traits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/device.h"
#include "ops/dtype.h"

namespace olmo2 {

/// Owning, 64-byte aligned, zero-initialised memory on one device. Move-only.
class Buffer {
 public:
  Buffer() = default;
  /// Allocates `bytes` on `device`. Throws Error when the allocation fails or when
  /// `device` is CUDA in a build without CUDA.
  Buffer(size_t bytes, Device device = Device::CPU);
  void* data() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  struct Free {
    Device device;
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> ptr_{nullptr, Free{Device::CPU}};
  size_t bytes_ = 0;
  Device device_ = Device::CPU;
};

/// A non-owning view: pointer, dtype, device, shape and strides (in elements).
/// Copying a view never copies data; the memory must outlive the view.
class TensorView {
 public:
  TensorView() = default;
  /// A contiguous (row-major) view of `shape` at `data`.
  TensorView(void* data, DType dtype, std::vector<int64_t> shape, Device device = Device::CPU);
  /// A strided view; `strides` has one entry per dimension.
  TensorView(void* data, DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides,
             Device device);

  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t size(int d) const { return shape_.at(d < 0 ? d + dim() : d); }
  int64_t stride(int d) const { return strides_.at(d < 0 ? d + dim() : d); }
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  bool empty() const { return data_ == nullptr; }

  /// Typed pointer to a CPU f32 view. Throws ShapeError for another dtype or device.
  float* f32() const { return data_as<float>(); }
  /// Typed pointer to a CPU i32 view (token ids, positions). ShapeError otherwise.
  int32_t* i32() const { return data_as<int32_t>(); }
  /// Typed pointer to a CPU view of element type T (float, double, int32_t, int64_t,
  /// uint8_t). Throws ShapeError when the dtype is not T's or the view is not on the CPU:
  /// host code reads device memory only through ops::copy.
  template <typename T>
  T* data_as() const {
    check_host(dtype_of<T>());
    return static_cast<T*>(data_);
  }

  /// Rows [begin, end) of dimension 0 (same strides).
  TensorView rows(int64_t begin, int64_t end) const;
  /// Columns [begin, end) of a 2-d view (same strides; rows then are not contiguous).
  TensorView cols(int64_t begin, int64_t end) const;
  /// Column c of a 2-d view as a 1-d view of its rows (stride: the row stride).
  TensorView col(int64_t c) const;
  /// Same data, new contiguous shape with the same element count. Requires contiguity.
  TensorView reshape(std::vector<int64_t> shape) const;

  /// "[2, 3]" — for error messages.
  std::string shape_str() const;

 private:
  void check_host(DType want) const;
  void* data_ = nullptr;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
};

/// A buffer together with a contiguous view of it.
class Tensor {
 public:
  Tensor() = default;
  /// Zero-filled contiguous tensor.
  static Tensor zeros(std::vector<int64_t> shape, DType dtype = DType::F32,
                      Device device = Device::CPU);
  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  float* f32() const { return view_.f32(); }
  int32_t* i32() const { return view_.i32(); }
  DType dtype() const { return view_.dtype(); }
  Device device() const { return view_.device(); }
  const std::vector<int64_t>& shape() const { return view_.shape(); }
  int64_t numel() const { return view_.numel(); }
  bool empty() const { return view_.empty(); }

 private:
  Buffer buffer_;
  TensorView view_;
};

#if __cplusplus >= 202002L  // the .cu files of ops/cuda are C++17
/// A 1-d CPU view of host values (token ids, positions, targets, small buffers): its
/// dtype is T's (dtype_of). The values must outlive the view; a view of const values
/// must only be read.
template <typename T>
TensorView host_view(std::span<T> values) {
  using V = std::remove_const_t<T>;
  return TensorView(const_cast<V*>(values.data()), dtype_of<V>(), {static_cast<int64_t>(values.size())});
}
template <typename T>
TensorView host_view(std::vector<T>& values) { return host_view(std::span<T>(values)); }
template <typename T>
TensorView host_view(const std::vector<T>& values) { return host_view(std::span<const T>(values)); }
template <typename T, size_t N>
TensorView host_view(T (&values)[N]) { return host_view(std::span<T>(values, N)); }
#endif

/// Human-readable "[a, b, c]".
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace olmo2
