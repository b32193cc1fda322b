// The backend test's cases (docs/architecture.md §10, "The op table and its test"): one
// case per op of ops/op_list.h, registered by name with OLMO2_OP_CASE. A case builds
// odd-shaped host inputs in every dtype the op takes, runs the public op on Device::CUDA
// views (a GPU, the SIMT executor of the OLMO2_CUDA_ON_CPU build, or the emulated
// device, whichever this process has) and ops::cpu:: on host copies, and compares every
// output element within a bound from the op's error analysis (tests/ops/error_bounds.h):
// absolute plus relative, a NaN or infinity anywhere but opposite the same one fails. On
// the emulated device the two run the same CPU code, so every bound is zero there.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "tests/ops/error_bounds.h"

namespace olmo2::ops::test {

using OpCase = void (*)();

/// Every registered case by op name.
std::map<std::string, OpCase>& op_cases();

/// Registers `run` as the case of op `name` (a static object of each cases file).
struct RegisterOpCase {
  RegisterOpCase(const char* name, OpCase run);
};

/// Defines the case of op `op`: the function body follows the macro.
#define OLMO2_OP_CASE(op)                                                                   \
  static void op##_case();                                                                  \
  static const ::olmo2::ops::test::RegisterOpCase op##_registered(#op, &op##_case);         \
  static void op##_case()

/// Whether the device is the emulated one (bounds are then zero: bit-exact).
bool device_is_emulated();

/// Seeded N(0, scale²) host values of `dtype` (f32 or bf16: the rounded values).
Tensor host_randn(std::vector<int64_t> shape, uint64_t seed, DType dtype = DType::F32, float scale = 1.0f);
/// Seeded i32 values in [lo, hi).
Tensor host_ints(int64_t n, int32_t lo, int32_t hi, uint64_t seed);
/// A host tensor of 0xff bytes (NaN in f32 and bf16).
Tensor host_poisoned(std::vector<int64_t> shape, DType dtype = DType::F32);
/// A host copy of a host tensor.
Tensor host_clone(const Tensor& t);
/// |x| of a host f32 or bf16 tensor, same dtype.
Tensor host_abs(const Tensor& x);

/// The device copy of a contiguous host tensor, and the host copy of a device tensor
/// (ops::copy; the copy case checks copy itself).
Tensor to_dev(const Tensor& host);
Tensor to_host_copy(const Tensor& dev);

/// The view of the first `cols` columns of a 2-d tensor (rows strided when it is wider).
TensorView first_cols(const Tensor& t, int64_t cols);

/// Expects the whole device tensor `got` (downloaded) within `bound` of the whole host
/// tensor `want`, element by element (within_bounds); zero bounds on the emulated device.
void expect_close(const std::string& what, const Tensor& want, const Tensor& got, std::vector<double> bound);
/// The same with bound rel·|want_i| + abs (NaN opposite NaN passes).
void expect_close(const std::string& what, const Tensor& want, const Tensor& got, double rel, double abs = 0.0);
/// Per-element bounds scale·mag_i over a host tensor of magnitudes (f32 or bf16).
std::vector<double> scaled(const Tensor& mag, double scale);
/// a_i + b_i.
std::vector<double> plus(std::vector<double> a, const std::vector<double>& b);
/// Expects the device tensor `got` (downloaded) to hold the bytes of host `want`: for
/// integer outputs and ops that move or round values without arithmetic.
void expect_same(const std::string& what, const Tensor& want, const Tensor& got);
/// RoPE's bounds over x [T, heads·hd] (rows of whole heads): 2·8u·scale·(|x_i| +
/// |x_partner|) each, the partner of element i of a head being i ± hd/2 (the rotated pair).
std::vector<double> rope_bounds(const Tensor& x, int hd, double scale);
/// Expects |got − want| ≤ bound for a scalar result (zero bound when emulated).
void expect_scalar(const std::string& what, double want, double got, double bound);

}  // namespace olmo2::ops::test
