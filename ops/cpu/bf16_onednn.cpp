// The onednn path of the bf16 products (docs/architecture.md §2, "bf16 products"): the
// forward y = bf16(x)·wᵀ and the backward's dx = bf16(dy)·w and dw = bf16(dy)ᵀ·bf16(x),
// each one oneDNN matmul with bf16 inputs and f32 output (f32 accumulation), on oneDNN's
// CPU engine with the ISA it picks (AMX tiles where the CPU and the OS allow them).
// oneDNN keeps no fixed summation order across M or thread counts, so only the products
// that need no batch invariance come here (ops/bf16_gemm.h). Source: oneDNN 2.6
// matmul primitive (https://oneapi-src.github.io/oneDNN/dev_guide_matmul.html).
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "ops/cpu/bf16_gemm_detail.h"

namespace olmo2::ops {
namespace detail {
namespace {

using dt = dnnl::memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One matmul dst [m, n] (+)= src [m, k] · wei [k, n]: src bf16, contiguous; wei bf16 with
// element strides (wk, wn); dst f32 with row stride ldd. The primitives are made once per
// shape, strides, accumulation and thread count (oneDNN plans its split at creation).
struct Key {
  int64_t m, n, k, wk, wn, ldd;
  bool accumulate;
  int threads;
  bool operator<(const Key& o) const {
    return std::tie(m, n, k, wk, wn, ldd, accumulate, threads) <
           std::tie(o.m, o.n, o.k, o.wk, o.wn, o.ldd, o.accumulate, o.threads);
  }
};

struct Matmul {
  dnnl::matmul prim;
  dnnl::memory::desc src, wei, dst;
};

// Training uses a few dozen shapes; the cache is emptied if far more turn up.
constexpr size_t kMaxCached = 512;

Matmul matmul(const Key& key) {
  static std::mutex mu;
  static std::map<Key, Matmul> cache;
  const std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= kMaxCached) cache.clear();
  const dnnl::memory::desc src({key.m, key.k}, dt::bf16, dnnl::memory::dims{key.k, 1});
  const dnnl::memory::desc wei({key.k, key.n}, dt::bf16, dnnl::memory::dims{key.wk, key.wn});
  const dnnl::memory::desc dst({key.m, key.n}, dt::f32, dnnl::memory::dims{key.ldd, 1});
  dnnl::primitive_attr attr;
  if (key.accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), attr, engine());
  return cache.emplace(key, Matmul{dnnl::matmul(pd), src, wei, dst}).first->second;
}

void run(const Key& key, const uint16_t* src, const uint16_t* wei, float* dst) {
  const Matmul mm = matmul(key);
  auto* s = const_cast<uint16_t*>(src);
  auto* w = const_cast<uint16_t*>(wei);
  dnnl::stream stream(engine());
  mm.prim.execute(stream, {{DNNL_ARG_SRC, dnnl::memory(mm.src, engine(), s)},
                           {DNNL_ARG_WEIGHTS, dnnl::memory(mm.wei, engine(), w)},
                           {DNNL_ARG_DST, dnnl::memory(mm.dst, engine(), dst)}});
  stream.wait();
}

// a [rows, cols] (f32, row stride a.stride(0)) rounded to bf16 (nearest even), packed
// contiguous — or transposed, [cols, rows], when `transpose`.
std::vector<uint16_t> pack_bf16(const TensorView& a, bool transpose) {
  const int64_t rows = a.size(0), cols = a.size(1), lda = a.stride(0);
  const float* src = a.f32();
  std::vector<uint16_t> out(static_cast<size_t>(rows * cols));
  if (!transpose) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) out[static_cast<size_t>(i * cols + j)] = f32_to_bf16(src[i * lda + j]);
    return out;
  }
  constexpr int64_t kB = 32;  // 32 × 32 blocks: both sides stay in L1
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t j0 = 0; j0 < cols; j0 += kB)
    for (int64_t i0 = 0; i0 < rows; i0 += kB)
      for (int64_t j = j0; j < std::min(cols, j0 + kB); ++j)
        for (int64_t i = i0; i < std::min(rows, i0 + kB); ++i)
          out[static_cast<size_t>(j * rows + i)] = f32_to_bf16(src[i * lda + j]);
  return out;
}

const uint16_t* bf16_data(const TensorView& w) { return static_cast<const uint16_t*>(w.data()); }

int threads() { return omp_get_max_threads(); }

}  // namespace

void linear_onednn(const TensorView& x, const TensorView& w, const TensorView& y) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(y.f32() + i * y.stride(0), y.f32() + i * y.stride(0) + n, 0.0f);
    return;
  }
  const std::vector<uint16_t> xb = pack_bf16(x, false);
  // wᵀ [K, N] is w [N, K] read with strides (1, ldw).
  run({m, n, k, 1, w.stride(0), y.stride(0), false, threads()}, xb.data(), bf16_data(w), y.f32());
}

void linear_dx_onednn(const TensorView& dy, const TensorView& w, const TensorView& dx, bool accumulate) {
  const int64_t m = dy.size(0), n = w.size(0), k = w.size(1);
  if (m == 0 || n == 0 || k == 0) return;
  const std::vector<uint16_t> dyb = pack_bf16(dy, false);
  run({m, k, n, w.stride(0), 1, dx.stride(0), accumulate, threads()}, dyb.data(), bf16_data(w), dx.f32());
}

void linear_dw_onednn(const TensorView& x, const TensorView& dy, const TensorView& dw, bool accumulate) {
  const int64_t m = x.size(0), k = x.size(1), n = dy.size(1);
  if (m == 0 || n == 0 || k == 0) return;
  const std::vector<uint16_t> dyt = pack_bf16(dy, true), xb = pack_bf16(x, false);
  run({n, k, m, k, 1, dw.stride(0), accumulate, threads()}, dyt.data(), xb.data(), dw.f32());
}

bool onednn_bf16_matmul_available() {
  // oneDNN 2.6 has bf16 matmuls for avx512_core and up only: on an AVX2 CPU it makes no
  // primitive ("could not create a primitive descriptor iterator").
  static const bool available = [] {
    try {
      const dnnl::memory::desc a({1, 32}, dt::bf16, dnnl::memory::dims{32, 1}),
          b({32, 1}, dt::bf16, dnnl::memory::dims{1, 32}), c({1, 1}, dt::f32, dnnl::memory::dims{1, 1});
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

}  // namespace detail

const char* onednn_cpu_isa_name() {
  using isa = dnnl::cpu_isa;
  static const char* name = [] {
    switch (dnnl::get_effective_cpu_isa()) {
      case isa::avx512_core_amx:
        return "avx512_core_amx";
      case isa::avx512_core_bf16:
        return "avx512_core_bf16";
      case isa::avx512_core_vnni:
        return "avx512_core_vnni";
      case isa::avx512_core:
        return "avx512_core";
      case isa::avx2_vnni:
        return "avx2_vnni";
      case isa::avx2:
        return "avx2";
      case isa::avx:
        return "avx";
      case isa::sse41:
        return "sse41";
      default:
        return "other";
    }
  }();
  return name;
}

bool onednn_uses_amx() {
  static const bool amx = (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) &
                           static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx)) ==
                          static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  return amx;
}

}  // namespace olmo2::ops
