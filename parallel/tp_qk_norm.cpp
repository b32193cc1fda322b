#include "parallel/tp_qk_norm.h"

#include "ops/backward.h"
#include "ops/rmsnorm.h"
#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"

namespace olmo2::parallel {

void tp_qk_norm(const TensorView& q, const TensorView& w_q, int64_t q_width, const TensorView& k,
                const TensorView& w_k, int64_t k_width, bool k_counts, float eps, Communicator& tp) {
  OLMO2_CHECK(q.dim() == 2 && k.dim() == 2 && q.size(0) == k.size(0) && w_q.dim() == 1 &&
                  w_k.dim() == 1 && w_q.size(0) == q.size(1) && w_k.size(0) == k.size(1) &&
                  q.stride(1) == 1 && k.stride(1) == 1,
              "tp_qk_norm: q ", q.shape_str(), " w_q ", w_q.shape_str(), " k ", k.shape_str(), " w_k ",
              w_k.shape_str());
  OLMO2_CHECK(q_width >= q.size(1) && k_width >= k.size(1), "tp_qk_norm: global widths ", q_width,
              "/", k_width, " smaller than the local slices");
  const Tensor stats = Tensor::zeros({q.size(0), 2}, DType::F32, q.device());  // (Σq², Σk²) per token
  ops::rmsnorm_partials(q, stats.view().col(0));
  if (k_counts) ops::rmsnorm_partials(k, stats.view().col(1));
  all_reduce_sum(tp, stats.view());
  ops::rmsnorm_apply(q, w_q, stats.view().col(0), q_width, eps, q);
  ops::rmsnorm_apply(k, w_k, stats.view().col(1), k_width, eps, k);
}

void tp_qk_norm_backward(const TensorView& q0, const TensorView& w_q, int64_t q_width, const TensorView& dq,
                         const TensorView& dw_q, const TensorView& k0, const TensorView& w_k, int64_t k_width,
                         const TensorView& dk, const TensorView& dw_k, bool k_counts, float eps, Communicator& tp) {
  OLMO2_CHECK(q0.dim() == 2 && k0.dim() == 2 && q0.size(0) == k0.size(0), "tp_qk_norm_backward: q0 ",
              q0.shape_str(), " k0 ", k0.shape_str());
  const int64_t n = q0.size(0);
  const Tensor st = Tensor::zeros({4, n}, DType::F32, q0.device());  // Σq², Σg·w·q, Σk², Σg·w·k
  auto row = [&](int64_t r) { return st.view().rows(r, r + 1).reshape({n}); };
  ops::rmsnorm_backward_partials(q0, w_q, dq, row(0), row(1));
  ops::rmsnorm_backward_partials(k0, w_k, dk, row(2), row(3));
  if (!k_counts) ops::fill(row(2), 0.0);
  all_reduce_sum(tp, st.view());
  ops::rmsnorm_backward_finish(q0, w_q, eps, q_width, dq, row(0), row(1), dq, dw_q);
  if (!k_counts) ops::fill(row(3), 0.0);
  ops::rmsnorm_backward_finish(k0, w_k, eps, k_width, dk, row(2), row(3), dk, dw_k);
}

}  // namespace olmo2::parallel
