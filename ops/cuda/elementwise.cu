// CUDA element-wise ops: swiglu (+ backward), add_inplace and the AdamW step, with the
// CPU ops' contracts (ops/elementwise.h, ops/backward.h, ops/adamw.h) and their order
// of fp32 operations: each multiply, add and divide that the CPU code rounds on its own
// is an explicitly rounded intrinsic here (__fmul_rn, …), so nvcc cannot fuse it into an
// fma the CPU does not do. Only exp differs (CUDA's expf, ≤ 2 ulp, vs the host libm).
#include <cuda_bf16.h>

#include "core/error.h"
#include "ops/cuda/elementwise_launch.cuh"
#include "ops/cuda/kernels.h"
#include "ops/op_checks.h"

namespace olmo2::ops::cuda {
namespace {

using detail::launch_elements;

// A row of f32 elements with a row stride, as the kernels index it.
struct Rows {
  float* p;
  int64_t ld;
  __device__ float& at(int64_t r, int64_t c) const { return p[r * ld + c]; }
};

Rows rows_of(const TensorView& t) { return {static_cast<float*>(t.data()), t.stride(0)}; }

// The shared check (ops/op_checks.h); plus f32 and CUDA.
void check_same(const TensorView& a, const TensorView& b, const char* what) {
  elementwise_check_same(a, b, what);
  OLMO2_CHECK(a.dtype() == DType::F32 && b.dtype() == DType::F32 && a.device() == Device::CUDA &&
                  b.device() == Device::CUDA,
              what, ": wants f32 CUDA views, got ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
}

__device__ inline float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// σ(g) = 1/(1 + exp(−g)) and silu(g) = g/(1 + exp(−g)), as the CPU writes them.
__device__ inline float one_plus_exp_neg(float g) { return __fadd_rn(1.0f, expf(-g)); }

struct Swiglu {
  Rows g, u, o;
  bool bf;
  __device__ void operator()(int64_t r, int64_t c) const {
    float s = __fdiv_rn(g.at(r, c), one_plus_exp_neg(g.at(r, c)));
    if (bf) s = round_bf16(s);
    const float p = __fmul_rn(s, u.at(r, c));
    o.at(r, c) = bf ? round_bf16(p) : p;
  }
};

struct SwigluBackward {
  Rows g, u, d, dg, du;
  __device__ void operator()(int64_t r, int64_t c) const {
    const float gi = g.at(r, c), ui = u.at(r, c), di = d.at(r, c);  // read before dg/du (may alias) are written
    const float sig = __fdiv_rn(1.0f, one_plus_exp_neg(gi));
    const float silu = __fmul_rn(gi, sig);
    // di·ui·sig·(1 + gi·(1 − sig)), left to right as the CPU
    const float tail = __fadd_rn(1.0f, __fmul_rn(gi, __fsub_rn(1.0f, sig)));
    dg.at(r, c) = __fmul_rn(__fmul_rn(__fmul_rn(di, ui), sig), tail);
    du.at(r, c) = __fmul_rn(di, silu);
  }
};

struct Add {
  Rows y, x;
  bool bf;
  __device__ void operator()(int64_t r, int64_t c) const {
    const float s = __fadd_rn(y.at(r, c), x.at(r, c));
    y.at(r, c) = bf ? round_bf16(s) : s;
  }
};

struct AdamW {
  float *p, *m, *v;
  const float* g;
  AdamWStep s;
  __device__ void operator()(int64_t, int64_t i) const {
    float pi = p[i];
    const float gi = g[i];
    if (s.decayed) pi = __fmul_rn(pi, s.decay);
    const float mi = m[i];
    const float diff = __fsub_rn(gi, mi);
    const float mn = s.w1_small ? fmaf(s.w1, diff, mi) : fmaf(__fsub_rn(s.w1, 1.0f), diff, gi);
    const float vn = fmaf(__fmul_rn(s.w2, gi), gi, __fmul_rn(v[i], s.beta2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vn), s.bc2_sqrt), s.eps);
    p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(s.neg_step, mn), denom));
    m[i] = mn;
    v[i] = vn;
  }
};

}  // namespace

void swiglu(const TensorView& gate, const TensorView& up, const TensorView& out, DType act) {
  check_same(gate, up, "swiglu");
  check_same(gate, out, "swiglu");
  launch_elements("swiglu", gate.size(0), gate.size(1),
                  Swiglu{rows_of(gate), rows_of(up), rows_of(out), act == DType::BF16});
}

void swiglu_backward(const TensorView& gate, const TensorView& up, const TensorView& dout, const TensorView& dgate,
                     const TensorView& dup) {
  check_same(gate, up, "swiglu_backward");
  check_same(gate, dout, "swiglu_backward");
  check_same(gate, dgate, "swiglu_backward");
  check_same(gate, dup, "swiglu_backward");
  launch_elements("swiglu_backward", gate.size(0), gate.size(1),
                  SwigluBackward{rows_of(gate), rows_of(up), rows_of(dout), rows_of(dgate), rows_of(dup)});
}

void add_inplace(const TensorView& y, const TensorView& x, DType act) {
  check_same(y, x, "add");
  launch_elements("add_inplace", y.size(0), y.size(1), Add{rows_of(y), rows_of(x), act == DType::BF16});
}

void adamw_step(const TensorView& param, const TensorView& grad, const TensorView& exp_avg,
                const TensorView& exp_avg_sq, const AdamWStep& step) {
  for (const TensorView* v : {&grad, &exp_avg, &exp_avg_sq}) {
    OLMO2_CHECK(v->shape() == param.shape() && v->is_contiguous() && v->dtype() == DType::F32 &&
                    v->device() == Device::CUDA,
                "adamw_step: ", v->shape_str(), " ", dtype_name(v->dtype()), " beside the parameter ",
                param.shape_str());
  }
  OLMO2_CHECK(param.is_contiguous() && param.dtype() == DType::F32 && param.device() == Device::CUDA,
              "adamw_step: parameter ", param.shape_str(), " ", dtype_name(param.dtype()));
  const auto f = [](const TensorView& t) { return static_cast<float*>(t.data()); };
  launch_elements("adamw_step", 1, param.numel(),
                  AdamW{f(param), f(exp_avg), f(exp_avg_sq), f(grad), step});
}

}  // namespace olmo2::ops::cuda
