// The CPU backend's argument checks: the shared ones (ops/op_checks.h) plus the check
// that a view lies in host memory. Used by the CPU ops (ops/cpu/*.cpp).
#pragma once

#include <cblas.h>

#include <cstdint>

#include "core/error.h"
#include "ops/op_checks.h"
#include "ops/tensor.h"

namespace olmo2::ops::detail {

/// A 2-d f32 CPU view with contiguous rows; InputError/ShapeError naming `op` and `name`.
inline void check_cpu_rows(const TensorView& t, const char* op, const char* name) {
  check_f32_rows(t, op, name);
  OLMO2_CHECK(t.device() == Device::CPU, op, ": ", name, " is not on the CPU");
}

/// `b` a 2-d f32 CPU view of `a`'s shape with contiguous rows.
inline void check_cpu_same(const TensorView& a, const TensorView& b, const char* op, const char* name) {
  check_same_f32_rows(a, b, op, name);
  OLMO2_CHECK(b.device() == Device::CPU, op, ": ", name, " is not on the CPU");
}

/// A contiguous f32 CPU vector of `d` elements.
inline void check_cpu_vector(const TensorView& t, int64_t d, const char* op, const char* name) {
  OLMO2_CHECK(t.dim() == 1 && t.size(0) == d && t.dtype() == DType::F32 && t.device() == Device::CPU &&
                  t.stride(0) == 1,
              op, ": ", name, " must be a contiguous f32 CPU vector of ", d, ", got ", t.shape_str());
}

/// An extent or leading dimension as OpenBLAS's integer type.
inline blasint blas_int(int64_t v) { return static_cast<blasint>(v); }

}  // namespace olmo2::ops::detail
