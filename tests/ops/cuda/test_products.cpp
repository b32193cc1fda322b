// The CUDA products (linear, linear_batch_invariant, linear_backward) against ops::cpu::
// (skipped, saying why, without a GPU). docs/architecture.md §2, §10.
//
// Tolerance: per element, from the products' error analysis (tests/ops/error_bounds.h):
// each backend within sum_error(K + 1)·Σ|x||w| of the exact product, so the two within
// twice that. Both form the same products — fp32 products of f32 values (TF32 is off),
// or exact products of bf16(x) and a bf16 w (the bf16 rounding of x is the same, nearest
// even, on both sides, so the exact reference rounds x too) — and add them in fp32 in
// their own orders. The rows of x are scaled by powers of two from 2⁻⁶ to 2⁶, so a small
// row's error is checked against its own size, not the largest row's. Batch invariance
// is checked bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/error.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/backward.h"
#include "ops/cpu/kernels.h"
#include "ops/gemm.h"
#include "tests/ops/cuda/cuda_test_util.h"
#ifdef OLMO2_HAVE_CUDA
#include "ops/cuda/fixed_order_gemm.h"
#include "ops/cuda/matmul.h"
#endif

namespace olmo2::ops {
namespace {

// Seeded N(0, 1) host values of `dtype` (bf16: the rounded values).
Tensor randn(std::vector<int64_t> shape, uint64_t seed, DType dtype = DType::F32) {
  Tensor t = Tensor::zeros(std::move(shape), dtype);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = dist(rng);
    if (dtype == DType::F32) t.f32()[i] = v;
    else static_cast<uint16_t*>(t.view().data())[i] = f32_to_bf16(v);
  }
  return t;
}

struct Shape {
  int64_t m, k, n;
  std::string name(DType w, bool strided) const {
    return "M " + std::to_string(m) + " K " + std::to_string(k) + " N " + std::to_string(n) + " w " + dtype_name(w) +
           (strided ? " strided rows" : "");
  }
};

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (int64_t m : {1, 3, 17, 130})
    for (auto [k, n] : {std::pair<int64_t, int64_t>{37, 1000}, {1000, 37}, {2050, 130}, {64, 48}})
      out.push_back({m, k, n});
  return out;
}

#ifdef OLMO2_HAVE_CUDA

// A host tensor and its device copy, viewed with `cols` columns of a wider allocation
// when `pad` > 0 (rows strided: stride cols + pad).
struct Pair {
  Tensor host, dev;
  int64_t cols;
  TensorView h() const { return host.view().cols(0, cols); }
  TensorView d() const { return dev.view().cols(0, cols); }
};

Pair pair(int64_t rows, int64_t cols, uint64_t seed, DType dtype = DType::F32, int64_t pad = 0) {
  Pair p{randn({rows, cols + pad}, seed, dtype), Tensor(), cols};
  p.dev = test::to_device(p.host.view());
  return p;
}

// x with row r scaled by 2^(3·(r mod 5) − 6): rows from 2⁻⁶ to 2⁶ of each other.
Pair scaled_pair(int64_t rows, int64_t cols, uint64_t seed, int64_t pad = 0) {
  Pair p{randn({rows, cols + pad}, seed), Tensor(), cols};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols + pad; ++c) p.host.f32()[r * (cols + pad) + c] *= std::ldexp(1.0f, int(3 * (r % 5) - 6));
  p.dev = test::to_device(p.host.view());
  return p;
}

// The values of x, rounded to bf16 where the product rounds them (a bf16 w).
std::vector<double> inputs(const Pair& x, DType wt) {
  std::vector<double> v = test::dense(x.h());
  if (wt == DType::BF16)
    for (double& e : v) e = round_bf16(static_cast<float>(e));
  return v;
}

// Bounds over the whole allocation of `out` from the between-backends bounds of its
// first `cols` columns; the padding must come back untouched (bound 0).
std::vector<double> bounds(const test::Expected& e, const Pair& out) {
  const int64_t rows = out.host.view().size(0), width = out.host.view().size(1);
  std::vector<double> b(static_cast<size_t>(rows * width), 0.0);
  const std::vector<double> two = e.between_two();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < out.cols; ++c) b[static_cast<size_t>(r * width + c)] = two[static_cast<size_t>(r * out.cols + c)];
  return b;
}

using Product = void (*)(const TensorView&, const TensorView&, const TensorView&);

void check_forward(Product cpu_op, Product op, const char* op_name) {
  for (const Shape& s : shapes()) {
    for (DType wt : {DType::F32, DType::BF16}) {
      for (bool strided : {false, true}) {
        const std::string what = std::string(op_name) + " " + s.name(wt, strided);
        const Pair x = scaled_pair(s.m, s.k, 1, strided ? 5 : 0), w = pair(s.n, s.k, 2, wt, strided ? 3 : 0);
        const Pair y = pair(s.m, s.n, 3, DType::F32, strided ? 7 : 0);
        const test::Expected e = test::product(inputs(x, wt), test::dense(w.h()), s.m, s.n, s.k, false, true);
        cpu_op(x.h(), w.h(), y.h());
        // Unstrided: every element poisoned first. Strided: y starts as the CPU's did,
        // so an unwritten element or a write into the padding shows as a difference.
        if (!strided) test::poison(y.dev.view());
        op(x.d(), w.d(), y.d());
        test::expect_close(y.host.view(), test::to_host(y.dev.view()).view(), bounds(e, y), what);
      }
    }
  }
}

TEST(CudaProducts, LinearMatchesCpu) {
  OLMO2_REQUIRE_GPU();
  check_forward(cpu::linear, linear, "linear");
}

TEST(CudaProducts, LinearBatchInvariantMatchesCpu) {
  OLMO2_REQUIRE_GPU();
  check_forward(cpu::linear_batch_invariant, linear_batch_invariant, "linear_batch_invariant");
}

TEST(CudaProducts, EmptyAndZeroDepth) {
  OLMO2_REQUIRE_GPU();
  for (DType wt : {DType::F32, DType::BF16}) {
    // K = 0: y is all zeros (the empty sum).
    const Pair x = pair(3, 0, 1), w = pair(5, 0, 2, wt), y = pair(3, 5, 3);
    test::poison(y.dev.view());
    linear(x.d(), w.d(), y.d());
    const Tensor zeros = Tensor::zeros({3, 5});
    test::expect_close(zeros.view(), test::to_host(y.d()).view(), 0.0, std::string("K = 0, w ") + dtype_name(wt));
    // M = 0: nothing to do, no error.
    const Pair x0 = pair(0, 4, 1), y0 = pair(0, 6, 3), w0 = pair(6, 4, 2, wt);
    EXPECT_NO_THROW(linear(x0.d(), w0.d(), y0.d()));
    EXPECT_NO_THROW(linear_batch_invariant(x0.d(), w0.d(), y0.d()));
  }
}

TEST(CudaProducts, RefusesWhatTheCpuRefuses) {
  OLMO2_REQUIRE_GPU();
  const Pair xb = pair(3, 8, 1, DType::BF16), w = pair(4, 8, 2), y = pair(3, 4, 3), x = pair(3, 8, 1);
  EXPECT_THROW(linear(xb.d(), w.d(), y.d()), ShapeError);  // x must be f32
  const Pair wrong = pair(4, 7, 2);
  EXPECT_THROW(linear(x.d(), wrong.d(), y.d()), ShapeError);
  const TensorView x_strided_last(x.dev.view().data(), DType::F32, {3, 4}, {8, 2}, Device::CUDA);
  const Pair w4 = pair(4, 4, 2);
  EXPECT_THROW(linear_batch_invariant(x_strided_last, w4.d(), y.d()), ShapeError);
}

// Row r of a batch equals the same row computed alone (M = 1), bit for bit, wherever
// it sits, and equals it inside other batch sizes.
TEST(CudaProducts, BatchInvariantBitForBit) {
  OLMO2_REQUIRE_GPU();
  for (auto [k, n] : {std::pair<int64_t, int64_t>{37, 1000}, {1000, 37}, {2050, 130}, {4096, 512}}) {
    for (DType wt : {DType::F32, DType::BF16}) {
      const std::string what = "K " + std::to_string(k) + " N " + std::to_string(n) + " w " + dtype_name(wt);
      const Pair x = pair(64, k, 11), w = pair(n, k, 12, wt), y = pair(64, n, 13);
      linear_batch_invariant(x.d(), w.d(), y.d());
      const Tensor all = test::to_host(y.d());
      for (int64_t r : {0, 1, 17, 63}) {
        // Alone: a copy of the row in its own contiguous tensor, and the row as a view.
        Tensor row = Tensor::zeros({1, k});
        std::memcpy(row.f32(), x.host.f32() + r * k, sizeof(float) * k);
        const Tensor row_dev = test::to_device(row.view());
        const Pair y1 = pair(1, n, 14), y2 = pair(1, n, 15);
        linear_batch_invariant(row_dev.view(), w.d(), y1.d());
        linear_batch_invariant(x.d().rows(r, r + 1), w.d(), y2.d());
        const Tensor a = test::to_host(y1.d()), b = test::to_host(y2.d());
        EXPECT_EQ(0, std::memcmp(a.f32(), all.f32() + r * n, sizeof(float) * n)) << what << " row " << r << " alone";
        EXPECT_EQ(0, std::memcmp(b.f32(), all.f32() + r * n, sizeof(float) * n)) << what << " row " << r << " view";
      }
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{5, 8}, {20, 37}, {0, 64}}) {  // M = 3, 17 and a re-run
        const Pair ys = pair(r1 - r0, n, 16);
        linear_batch_invariant(x.d().rows(r0, r1), w.d(), ys.d());
        const Tensor got = test::to_host(ys.d());
        EXPECT_EQ(0, std::memcmp(got.f32(), all.f32() + r0 * n, sizeof(float) * n * (r1 - r0)))
            << what << " rows " << r0 << ".." << r1;
      }
    }
  }
}

// Every (N, K) of the 1B model's products at TP 1 and 2 (q/k/v/o, gate/up, down, the LM
// head), f32 and bf16 weights: the rows of a batch of M equal the same rows of the
// 4,096-row batch bit for bit, for every M from 1 to 64 and a sweep to 4,096 (prefill
// chunks), at the start of x and at its end. The path (a pinned cuBLASLt algorithm, or
// our fixed-order kernel where none can be pinned) is printed per shape.
TEST(CudaProducts, BatchInvariantForEveryBatchSizeOfThe1BModel) {
  OLMO2_REQUIRE_GPU();
  const std::pair<int64_t, int64_t> shapes[] = {{2048, 2048}, {8192, 2048}, {2048, 8192}, {100352, 2048},
                                                {1024, 2048}, {2048, 1024}, {4096, 2048}, {2048, 4096}};
  std::vector<int64_t> batches;
  for (int64_t m = 1; m <= 64; ++m) batches.push_back(m);
  for (int64_t m = 65; m < 4096; m += 61) batches.push_back(m);
  for (int64_t m : {255, 256, 257, 511, 512, 513, 1023, 1024, 2047, 2048, 2049, 4095}) batches.push_back(m);
  const int64_t full = 4096;
  for (auto [n, k] : shapes) {
    const Pair x = pair(full, k, 31);
    for (DType wt : {DType::BF16, DType::F32}) {
      const std::string what = "N " + std::to_string(n) + " K " + std::to_string(k) + " w " + dtype_name(wt);
      const Pair w = pair(n, k, 32, wt);
      Tensor y_full = Tensor::zeros({full, n}, DType::F32, Device::CUDA);
      linear_batch_invariant(x.d(), w.d(), y_full.view());
      const Tensor all = test::to_host(y_full.view());
      const cuda::detail::MatOperand a{w.dev.view().data(), wt == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F, k, n, k, true};
      const bool pinned = cuda::detail::batch_invariant_algo_exists(a, cuda::detail::MatOperand{nullptr, a.type}, n, k);
      std::printf("%s: %s\n", what.c_str(), pinned ? "pinned cuBLASLt algorithm" : "fixed-order kernel");
      int64_t mismatches = 0;
      for (int64_t m : batches) {
        for (int64_t r0 : {int64_t{0}, full - m}) {
          Tensor y = Tensor::zeros({m, n}, DType::F32, Device::CUDA);
          linear_batch_invariant(x.d().rows(r0, r0 + m), w.d(), y.view());
          const Tensor got = test::to_host(y.view());
          if (std::memcmp(got.f32(), all.f32() + r0 * n, sizeof(float) * static_cast<size_t>(m * n)) != 0) {
            ADD_FAILURE() << what << ": rows " << r0 << " .. " << r0 + m << " differ from the full batch's";
            if (++mismatches > 5) break;
          }
        }
      }
    }
  }
}

// The fallback kernel on its own (whatever cuBLASLt can pin): within the products'
// per-element bounds of the CPU, and batch-invariant bit for bit.
TEST(CudaProducts, FixedOrderKernelMatchesCpuAndIsBatchInvariant) {
  OLMO2_REQUIRE_GPU();
  for (const Shape& s : shapes()) {
    for (DType wt : {DType::F32, DType::BF16}) {
      const std::string what = "fixed-order " + s.name(wt, false);
      const Pair x = scaled_pair(s.m, s.k, 41), w = pair(s.n, s.k, 42, wt);
      const bool bf = wt == DType::BF16;
      Tensor xb = Tensor::zeros({s.m, s.k}, bf ? DType::BF16 : DType::F32);
      for (int64_t i = 0; i < s.m * s.k; ++i) {
        if (bf) static_cast<uint16_t*>(xb.view().data())[i] = f32_to_bf16(x.host.f32()[i]);
        else xb.f32()[i] = x.host.f32()[i];
      }
      const Tensor xd = test::to_device(xb.view());
      Tensor y = Tensor::zeros({s.m, s.n}), yd = Tensor::zeros({s.m, s.n}, DType::F32, Device::CUDA);
      cpu::linear(x.h(), w.h(), y.view());
      test::poison(yd.view());
      cuda::detail::fixed_order_product(xd.view().data(), bf, s.k, w.dev.view().data(), bf, s.k,
                                  static_cast<float*>(yd.view().data()), s.n, s.m, s.n, s.k);
      const Pair yp{std::move(y), Tensor(), s.n};
      const test::Expected e = test::product(inputs(x, wt), test::dense(w.h()), s.m, s.n, s.k, false, true);
      const Tensor got = test::to_host(yd.view());
      test::expect_close(yp.host.view(), got.view(), bounds(e, yp), what);
      for (int64_t r = 0; r < s.m; r += 7) {  // each row alone
        Tensor one = Tensor::zeros({1, s.n}, DType::F32, Device::CUDA);
        const size_t esz = bf ? 2 : 4;
        cuda::detail::fixed_order_product(static_cast<const char*>(xd.view().data()) + r * s.k * esz, bf, s.k,
                                    w.dev.view().data(), bf, s.k, static_cast<float*>(one.view().data()), s.n, 1, s.n,
                                    s.k);
        EXPECT_EQ(0, std::memcmp(test::to_host(one.view()).f32(), got.f32() + r * s.n, sizeof(float) * s.n))
            << what << " row " << r;
      }
    }
  }
}

TEST(CudaProducts, LinearBackwardMatchesCpu) {
  OLMO2_REQUIRE_GPU();
  std::vector<Shape> all = shapes();
  all.push_back({0, 37, 20});  // no rows: dw zeroed or kept
  for (const Shape& s : all) {
    for (DType wt : {DType::F32, DType::BF16}) {
      for (auto [acc_dw, acc_dx] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
        const bool strided = s.m == 17;
        const std::string what = "linear_backward " + s.name(wt, strided) + " accumulate dw " +
                                 std::to_string(acc_dw) + " dx " + std::to_string(acc_dx);
        const int64_t pad = strided ? 3 : 0;
        const Pair x = scaled_pair(s.m, s.k, 21, pad), w = pair(s.n, s.k, 22, wt, pad);
        const Pair dy = scaled_pair(s.m, s.n, 23, pad);
        const Pair dx = pair(s.m, s.k, 24, DType::F32, pad), dw = pair(s.n, s.k, 25, DType::F32, pad);
        const std::vector<double> dx0 = test::dense(dx.h()), dw0 = test::dense(dw.h());
        // dx = dy·w [M, K] (sum over N), dw = dyᵀ·x [N, K] (sum over M), onto the old values
        // when accumulating.
        const test::Expected edx = test::product(test::dense(dy.h()), test::dense(w.h()), s.m, s.k, s.n, false, false,
                                                 acc_dx ? &dx0 : nullptr);
        const test::Expected edw = test::product(test::dense(dy.h()), test::dense(x.h()), s.n, s.k, s.m, true, false,
                                                 acc_dw ? &dw0 : nullptr);
        cpu::linear_backward(x.h(), w.h(), dy.h(), dx.h(), dw.h(), acc_dw, acc_dx);
        linear_backward(x.d(), w.d(), dy.d(), dx.d(), dw.d(), acc_dw, acc_dx);
        const Tensor dx_back = test::to_host(dx.dev.view()), dw_back = test::to_host(dw.dev.view());
        test::expect_close(dx.host.view(), dx_back.view(), bounds(edx, dx), what + ": dx");
        test::expect_close(dw.host.view(), dw_back.view(), bounds(edw, dw), what + ": dw");
      }
    }
  }
}

TEST(CudaProducts, LinearBackwardSkipsEmptyOutputs) {
  OLMO2_REQUIRE_GPU();
  const Pair x = pair(3, 37, 1), w = pair(20, 37, 2, DType::BF16), dy = pair(3, 20, 3);
  const Pair dx = pair(3, 37, 4), dw = pair(20, 37, 5);
  const test::Expected edw = test::product(test::dense(dy.h()), test::dense(x.h()), 20, 37, 3, true, false);
  const test::Expected edx = test::product(test::dense(dy.h()), test::dense(w.h()), 3, 37, 20, false, false);
  linear_backward(x.d(), w.d(), dy.d(), TensorView{}, dw.d(), false, false);
  cpu::linear_backward(x.h(), w.h(), dy.h(), TensorView{}, dw.h(), false, false);
  test::expect_close(dw.h(), test::to_host(dw.d()).view(), bounds(edw, dw), "dw only");
  linear_backward(x.d(), w.d(), dy.d(), dx.d(), TensorView{}, true, false);
  cpu::linear_backward(x.h(), w.h(), dy.h(), dx.h(), TensorView{}, true, false);
  test::expect_close(dx.h(), test::to_host(dx.d()).view(), bounds(edx, dx), "dx only");
}

#else

TEST(CudaProducts, LinearMatchesCpu) { OLMO2_REQUIRE_GPU(); }

#endif

}  // namespace
}  // namespace olmo2::ops
