// CPU implementations of the ops between kernels (ops/tensor_ops.h).
#include "ops/tensor_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/op_checks.h"

namespace olmo2::ops {
namespace {

// Calls fn(src_offset, dst_offset) (in elements) for every element of the shape, in
// row-major order.
template <typename Fn>
void for_each_element(const std::vector<int64_t>& shape, const std::vector<int64_t>& a_strides,
                      const std::vector<int64_t>& b_strides, Fn&& fn) {
  const int dims = static_cast<int>(shape.size());
  if (dims == 0) return fn(0, 0);
  for (int64_t d : shape) {
    if (d == 0) return;
  }
  std::vector<int64_t> idx(static_cast<size_t>(dims), 0);
  int64_t a = 0, b = 0;
  for (;;) {
    fn(a, b);
    int d = dims - 1;
    for (; d >= 0; --d) {
      const size_t u = static_cast<size_t>(d);
      if (++idx[u] < shape[u]) {
        a += a_strides[u], b += b_strides[u];
        break;
      }
      a -= a_strides[u] * (shape[u] - 1), b -= b_strides[u] * (shape[u] - 1);
      idx[u] = 0;
    }
    if (d < 0) return;
  }
}

bool rows_contiguous(const TensorView& v) { return v.dim() == 2 && v.stride(1) == 1; }

void check_index(const char* op, const TensorView& index, int64_t n, int64_t bound) {
  check_index_view(op, index, n);
  check_index_values(op, index.i32(), n, bound);
}

}  // namespace

namespace {
/// Converts n contiguous elements; s == d copies bits, else one of f32 → bf16 (nearest
/// even), bf16 → f32 and f16 → f32 / bf16 (exact widening, then rounding for bf16).
void convert_run(const char* in, DType s, char* out, DType d, int64_t n) {
  if (s == d) return void(std::memcpy(out, in, static_cast<size_t>(n) * dtype_size(s)));
  if (s == DType::F32 && d == DType::BF16) {
    const auto* x = reinterpret_cast<const float*>(in);
    auto* y = reinterpret_cast<uint16_t*>(out);
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
  } else if (s == DType::BF16 && d == DType::F32) {
    const auto* x = reinterpret_cast<const uint16_t*>(in);
    auto* y = reinterpret_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
  } else {  // f16 source
    const auto* x = reinterpret_cast<const uint16_t*>(in);
    for (int64_t i = 0; i < n; ++i) {
      const float v = f16_to_f32(x[i]);
      if (d == DType::F32) reinterpret_cast<float*>(out)[i] = v;
      else reinterpret_cast<uint16_t*>(out)[i] = f32_to_bf16(v);
    }
  }
}
}  // namespace

void cpu::copy(const TensorView& src, const TensorView& dst) {
  OLMO2_CHECK(src.shape() == dst.shape(), "copy: ", src.shape_str(), " to ", dst.shape_str());
  const DType s = src.dtype(), d = dst.dtype();
  const bool floats = (s == DType::F32 || s == DType::BF16 || s == DType::F16) && (d == DType::F32 || d == DType::BF16);
  OLMO2_CHECK(s == d || floats, "copy: ", dtype_name(s), " to ", dtype_name(d), " is not a supported conversion");
  const size_t si = dtype_size(s), di = dtype_size(d);
  const auto* in = static_cast<const char*>(src.data());
  auto* out = static_cast<char*>(dst.data());
  if (src.is_contiguous() && dst.is_contiguous()) {  // in parallel blocks of 64 Ki elements
    const int64_t n = src.numel(), block = int64_t{1} << 16, blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = b * block, len = std::min(block, n - at);
      convert_run(in + static_cast<size_t>(at) * si, s, out + static_cast<size_t>(at) * di, d, len);
    }
    return;
  }
  if (rows_contiguous(src) && rows_contiguous(dst)) {
    const int64_t rows = src.size(0), cols = src.size(1);
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
    for (int64_t r = 0; r < rows; ++r) {
      convert_run(in + static_cast<size_t>(r * src.stride(0)) * si, s, out + static_cast<size_t>(r * dst.stride(0)) * di,
                  d, cols);
    }
    return;
  }
  for_each_element(src.shape(), src.strides(), dst.strides(), [&](int64_t a, int64_t b) {
    convert_run(in + static_cast<size_t>(a) * si, s, out + static_cast<size_t>(b) * di, d, 1);
  });
}

void cpu::fill(const TensorView& dst, double value) {
  auto* out = static_cast<char*>(dst.data());
  auto put = [&](int64_t at) {
    switch (dst.dtype()) {
      case DType::F32: reinterpret_cast<float*>(out)[at] = static_cast<float>(value); break;
      case DType::BF16: reinterpret_cast<uint16_t*>(out)[at] = f32_to_bf16(static_cast<float>(value)); break;
      case DType::F64: reinterpret_cast<double*>(out)[at] = value; break;
      case DType::I32: reinterpret_cast<int32_t*>(out)[at] = static_cast<int32_t>(value); break;
      case DType::I64: reinterpret_cast<int64_t*>(out)[at] = static_cast<int64_t>(value); break;
      case DType::U8: reinterpret_cast<uint8_t*>(out)[at] = static_cast<uint8_t>(value); break;
      case DType::F16: OLMO2_THROW(ShapeError, "fill: f16 is a load-only dtype");
    }
  };
  if (dst.dtype() == DType::F32 && dst.is_contiguous()) {
    float* p = dst.f32();
    const int64_t n = dst.numel();
    const float v = static_cast<float>(value);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) p[i] = v;
    return;
  }
  for_each_element(dst.shape(), dst.strides(), dst.strides(), [&](int64_t, int64_t b) { put(b); });
}

void cpu::gather_rows(const TensorView& src, const TensorView& index, const TensorView& dst) {
  check_row_pair("gather_rows", src, dst);
  check_index("gather_rows", index, dst.size(0), src.size(0));
  const size_t es = dtype_size(src.dtype()), bytes = static_cast<size_t>(src.size(1)) * es;
  const int32_t* ix = index.i32();
  const auto* in = static_cast<const char*>(src.data());
  auto* out = static_cast<char*>(dst.data());
  for (int64_t i = 0; i < dst.size(0); ++i) {
    std::memcpy(out + static_cast<size_t>(i * dst.stride(0)) * es, in + static_cast<size_t>(ix[i] * src.stride(0)) * es,
                bytes);
  }
}

void cpu::scatter_rows(const TensorView& src, const TensorView& index, const TensorView& dst) {
  check_row_pair("scatter_rows", src, dst);
  check_index("scatter_rows", index, src.size(0), dst.size(0));
  check_index_distinct("scatter_rows", index.i32(), src.size(0));
  const size_t es = dtype_size(src.dtype()), bytes = static_cast<size_t>(src.size(1)) * es;
  const int32_t* ix = index.i32();
  const auto* in = static_cast<const char*>(src.data());
  auto* out = static_cast<char*>(dst.data());
  for (int64_t i = 0; i < src.size(0); ++i) {
    std::memcpy(out + static_cast<size_t>(ix[i] * dst.stride(0)) * es, in + static_cast<size_t>(i * src.stride(0)) * es,
                bytes);
  }
}

void cpu::round_to(const TensorView& x, DType dtype) {
  check_f32_view("round_to", x);
  if (dtype == DType::F32) return;
  OLMO2_CHECK(dtype == DType::BF16, "round_to: ", dtype_name(dtype), " is not a compute dtype (f32, bf16)");
  if (x.is_contiguous()) return round_to_dtype(x.f32(), static_cast<size_t>(x.numel()), dtype);
  OLMO2_CHECK(rows_contiguous(x), "round_to: needs contiguous rows, got ", x.shape_str());
  for (int64_t r = 0; r < x.size(0); ++r) round_to_dtype(x.f32() + r * x.stride(0), static_cast<size_t>(x.size(1)), dtype);
}

void cpu::scale(const TensorView& x, float factor) {
  check_f32_view("scale", x);
  OLMO2_CHECK(x.is_contiguous(), "scale: needs a contiguous view, got ", x.shape_str());
  float* p = x.f32();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
  for (int64_t i = 0; i < n; ++i) p[i] *= factor;
}

double cpu::sum_squares(const TensorView& x, double start) {
  check_f32_view("sum_squares", x);
  OLMO2_CHECK(x.is_contiguous(), "sum_squares: needs a contiguous view, got ", x.shape_str());
  constexpr int64_t kChunk = 1 << 14;
  const float* g = x.f32();
  const int64_t n = x.numel();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0.0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    partial[static_cast<size_t>(c)] = s;
  }
  for (double s : partial) start += s;
  return start;
}

double cpu::sum_row_norms(const TensorView& x) {
  check_f32_view("sum_row_norms", x);
  OLMO2_CHECK(rows_contiguous(x), "sum_row_norms: needs a 2-d view with contiguous rows, got ", x.shape_str());
  const int64_t rows = x.size(0), cols = x.size(1);
  double s = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.f32() + r * x.stride(0);
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c) sq += double(row[c]) * row[c];
    s += std::sqrt(sq);
  }
  return s;
}

}  // namespace olmo2::ops
