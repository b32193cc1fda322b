// CUDA rotary position embedding, forward and backward (ops/rope.h, ops/backward.h;
// docs/architecture.md §2, §3). The inverse frequencies come from the caller's
// RopeFrequencies (the host's bits) and are passed as a kernel argument with the cos/sin
// scaling; the angle a = position·inv_freq is one fp32 multiply as on the CPU, cos and
// sin are each multiplied by the scaling and rounded (exact for 1), and the rotation
// rounds each product and sum on its own as the CPU code does. Only sin/cos differ:
// CUDA's sincosf (≤ 2 ulp) against the host libm.
#include <cmath>

#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/runtime.h"

namespace olmo2::ops::cuda {
namespace {

constexpr int kThreads = 256;
// The largest head_dim/2 passed by value (2 KiB of kernel arguments).
constexpr int kMaxHalf = 512;

struct InvFreq {
  float v[kMaxHalf];
  float scaling;  // times cos and sin (RopeFrequencies::attention_scaling)
};

// x[t, h·hd + i], x[t, h·hd + i + half] rotated by a = (sign·pos[t])·inv_freq[i]; the
// backward is the forward at −pos (ops/cpu/rope.cpp: exact in fp32).
__global__ void rope_kernel(float* x, int64_t ldx, const int32_t* pos, int64_t rows, int n_heads, int half,
                            bool negate, InvFreq f) {
  const int64_t per_row = static_cast<int64_t>(n_heads) * half, total = rows * per_row;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / per_row, rest = e - t * per_row;
    const int64_t h = rest / half, i = rest - h * half;
    const int32_t p = negate ? -pos[t] : pos[t];
    const float a = __fmul_rn(static_cast<float>(p), f.v[i]);
    float s, c;
    sincosf(a, &s, &c);
    c = __fmul_rn(c, f.scaling), s = __fmul_rn(s, f.scaling);
    float* v = x + t * ldx + h * 2 * half;
    const float x1 = v[i], x2 = v[i + half];
    v[i] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
    v[i + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  }
}

void run(const char* op, const TensorView& x, const TensorView& pos, int n_heads, int head_dim,
         const RopeFrequencies& freq, bool negate) {
  OLMO2_CHECK(x.dim() == 2 && x.size(1) == static_cast<int64_t>(n_heads) * head_dim && head_dim % 2 == 0 &&
                  x.stride(1) == 1 && x.dtype() == DType::F32 && x.device() == Device::CUDA,
              op, ": x ", x.shape_str(), " ", dtype_name(x.dtype()), " n_heads ", n_heads, " head_dim ", head_dim);
  OLMO2_CHECK(pos.dim() == 1 && pos.size(0) == x.size(0) && pos.stride(0) == 1 && pos.dtype() == DType::I32 &&
                  pos.device() == Device::CUDA,
              op, ": positions ", pos.shape_str(), " ", dtype_name(pos.dtype()), " for x ", x.shape_str());
  const int half = head_dim / 2;
  OLMO2_CHECK(half <= kMaxHalf, op, ": head_dim ", head_dim, " above the CUDA kernel's limit ", 2 * kMaxHalf);
  OLMO2_CHECK(static_cast<int64_t>(freq.inv_freq.size()) == half, op, ": ", freq.inv_freq.size(),
              " inverse frequencies for head_dim ", head_dim, " (want ", half, ")");
  const int64_t total = x.size(0) * n_heads * half;
  if (total <= 0) return;
  InvFreq f{};
  for (int i = 0; i < half; ++i) f.v[i] = freq.inv_freq[static_cast<size_t>(i)];
  f.scaling = freq.attention_scaling;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65535);
  OLMO2_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, compute_stream(), rope_kernel)(
      static_cast<float*>(x.data()), x.stride(0), static_cast<const int32_t*>(pos.data()), x.size(0), n_heads, half,
      negate, f);
  OLMO2_CUDA_CHECK_LAUNCH(op);
}

}  // namespace

void rope(const TensorView& x, const TensorView& positions, int n_heads, int head_dim, const RopeFrequencies& f) {
  run("rope", x, positions, n_heads, head_dim, f, false);
}

// The forward at −position: cos is even and the rounded scaled sine odd, so this is s
// times the inverse rotation (ops/cpu/rope.cpp).
void rope_backward(const TensorView& dy, const TensorView& positions, int n_heads, int head_dim,
                   const RopeFrequencies& f) {
  run("rope_backward", dy, positions, n_heads, head_dim, f, true);
}

}  // namespace olmo2::ops::cuda
