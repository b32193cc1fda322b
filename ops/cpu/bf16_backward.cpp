// dx = dy·w for a bf16 w (the input gradient of linear_backward): w widened to f32 one
// panel at a time — exact, a bf16 value is an f32 value — and each panel one OpenBLAS
// sgemm, so the product has sgemm's fp32 accumulation and speed (docs/architecture.md §2).
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "ops/cpu/bf16_gemm_detail.h"

namespace olmo2::ops::detail {
namespace {
// A panel is up to kPanelN rows of w × kPanelK columns, 2 MiB of f32: a column block of
// dx is revisited once per kPanelN rows of w.
constexpr int64_t kPanelK = 256;
constexpr int64_t kPanelN = 2048;
blasint bi(int64_t v) { return static_cast<blasint>(v); }
}  // namespace

void linear_dx_bf16(const TensorView& dy, const TensorView& w, const TensorView& dx, bool accumulate) {
  const int64_t m = dy.size(0), n = w.size(0), k = w.size(1);
  if (m == 0 || n == 0 || k == 0) return;
  const auto* wp = static_cast<const uint16_t*>(w.data());
  const int64_t ldw = w.stride(0);
  std::vector<float> panel(static_cast<size_t>(std::min(n, kPanelN) * std::min(k, kPanelK)));
  for (int64_t k0 = 0; k0 < k; k0 += kPanelK) {
    const int64_t kb = std::min(kPanelK, k - k0);
    for (int64_t n0 = 0; n0 < n; n0 += kPanelN) {
      const int64_t nb = std::min(kPanelN, n - n0);
#pragma omp parallel for schedule(static) if (nb * kb > (1 << 16))
      for (int64_t r = 0; r < nb; ++r)
        for (int64_t c = 0; c < kb; ++c) panel[static_cast<size_t>(r * kb + c)] = bf16_to_f32(wp[(n0 + r) * ldw + k0 + c]);
      // dx[:, k0:k0+kb] (+)= dy[:, n0:n0+nb] · panel
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(m), bi(kb), bi(nb), 1.0f, dy.f32() + n0,
                  bi(dy.stride(0)), panel.data(), bi(kb), (accumulate || n0 > 0) ? 1.0f : 0.0f, dx.f32() + k0,
                  bi(dx.stride(0)));
    }
  }
}

}  // namespace olmo2::ops::detail
