// The one list of ops (docs/architecture.md §2 "The op table"). Each row names an op, its
// signature, the views that decide its device, and the devices that implement it. The
// row generates the declarations of the backends' implementations (ops/cpu/kernels.h,
// ops/cuda/kernels.h), the public op's dispatching body (ops/dispatch.cpp), and the list
// the backend test walks (tests/ops/backend_ops/): an op added here without a test case
// fails that test. Each op's contract (shapes, dtypes, errors, source of the math) is
// documented at its public declaration: gemm.h, embedding.h, rmsnorm.h, rope.h,
// attention.h, paged_attention.h, elementwise.h, backward.h, top_candidates.h,
// tensor_ops.h, adamw.h.
//
// Columns of OLMO2_OP(result, name, parameters, arguments, views, devices):
//   result      the return type;
//   name        the op (ops::name, cpu::name, cuda::name);
//   parameters  the parenthesised parameter list;
//   arguments   the parenthesised argument list passing the parameters on;
//   views       the parenthesised addresses of the TensorView parameters whose device
//               decides the backend (all must agree, empty views excepted); led by
//               kTransfer for an op whose two views may lie on two devices (copy: the
//               CPU's when both are on the CPU, the GPU backend's otherwise);
//   devices     kOnCpu | kOnCuda: the backends that implement it. A device not named
//               gets the op's named refusal, never a wrong result.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/paged_attention.h"
#include "ops/rope.h"
#include "ops/tensor.h"

namespace olmo2::ops {

/// The backends an op of the table runs on (its `devices` column).
enum OpDevices : unsigned { kOnCpu = 1u, kOnCuda = 2u };

/// The mark of a transfer op's views column (see above).
inline constexpr struct TransferViews {
} kTransfer{};

/// A row of the table as data: the op's name and its devices.
struct OpTableEntry {
  const char* name;
  unsigned devices;
};

}  // namespace olmo2::ops

// clang-format off
#define OLMO2_OP_TABLE(OLMO2_OP)                                                                                    \
  /* products and the model's forward ops */                                                                       \
  OLMO2_OP(void, linear, (const TensorView& x, const TensorView& w, const TensorView& y), (x, w, y),                \
           (&x, &w, &y), kOnCpu | kOnCuda)                                                                          \
  OLMO2_OP(void, linear_batch_invariant, (const TensorView& x, const TensorView& w, const TensorView& y),           \
           (x, w, y), (&x, &w, &y), kOnCpu | kOnCuda)                                                               \
  OLMO2_OP(void, embedding, (const TensorView& ids, const TensorView& table, const TensorView& out),                \
           (ids, table, out), (&ids, &table, &out), kOnCpu | kOnCuda)                                               \
  OLMO2_OP(void, embedding_slice, (const TensorView& ids, const TensorView& table, int64_t first_id,                \
           const TensorView& out), (ids, table, first_id, out), (&ids, &table, &out), kOnCpu | kOnCuda)             \
  OLMO2_OP(void, rmsnorm, (const TensorView& x, const TensorView& w, float eps, const TensorView& y),               \
           (x, w, eps, y), (&x, &w, &y), kOnCpu | kOnCuda)                                                          \
  OLMO2_OP(void, rmsnorm_partials, (const TensorView& x, const TensorView& sumsq), (x, sumsq), (&x, &sumsq),        \
           kOnCpu | kOnCuda)                                                                                        \
  OLMO2_OP(void, rmsnorm_apply, (const TensorView& x, const TensorView& w, const TensorView& sumsq,                 \
           int64_t d_total, float eps, const TensorView& y), (x, w, sumsq, d_total, eps, y), (&x, &w, &sumsq, &y),  \
           kOnCpu | kOnCuda)                                                                                        \
  OLMO2_OP(void, rope, (const TensorView& x, const TensorView& positions, int n_heads, int head_dim,                \
           const RopeFrequencies& f), (x, positions, n_heads, head_dim, f), (&x, &positions), kOnCpu | kOnCuda)     \
  OLMO2_OP(void, causal_attention, (const TensorView& q, const TensorView& k, const TensorView& v, int n_heads,     \
           int n_kv_heads, const TensorView& out, DType act, int64_t window),                                       \
           (q, k, v, n_heads, n_kv_heads, out, act, window), (&q, &k, &v, &out), kOnCpu | kOnCuda)                 \
  OLMO2_OP(float, causal_attention_max_logit, (const TensorView& q, const TensorView& k, int n_heads,              \
           int n_kv_heads, int64_t window), (q, k, n_heads, n_kv_heads, window), (&q, &k), kOnCpu | kOnCuda)       \
  OLMO2_OP(void, paged_attention, (const TensorView& q, const TensorView& k_pool, const TensorView& v_pool,         \
           int64_t block_size, const std::vector<PagedSequence>& sequences, int n_heads, int n_kv_heads,            \
           const TensorView& out, DType act, int64_t window),                                                       \
           (q, k_pool, v_pool, block_size, sequences, n_heads, n_kv_heads, out, act, window),                       \
           (&q, &k_pool, &v_pool, &out), kOnCpu | kOnCuda)                                                          \
  OLMO2_OP(void, swiglu, (const TensorView& gate, const TensorView& up, const TensorView& out, DType act),          \
           (gate, up, out, act), (&gate, &up, &out), kOnCpu | kOnCuda)                                              \
  OLMO2_OP(void, add_inplace, (const TensorView& y, const TensorView& x, DType act), (y, x, act), (&y, &x),         \
           kOnCpu | kOnCuda)                                                                                        \
  /* backward ops and losses */                                                                                    \
  OLMO2_OP(void, linear_backward, (const TensorView& x, const TensorView& w, const TensorView& dy,                  \
           const TensorView& dx, const TensorView& dw, bool accumulate_dw, bool accumulate_dx),                     \
           (x, w, dy, dx, dw, accumulate_dw, accumulate_dx), (&x, &w, &dy, &dx, &dw), kOnCpu | kOnCuda)             \
  OLMO2_OP(void, embedding_backward, (const TensorView& ids, const TensorView& dout, const TensorView& dtable),     \
           (ids, dout, dtable), (&ids, &dout, &dtable), kOnCpu | kOnCuda)                                           \
  OLMO2_OP(void, embedding_slice_backward, (const TensorView& ids, const TensorView& dout, int64_t first_id,        \
           const TensorView& dtable), (ids, dout, first_id, dtable), (&ids, &dout, &dtable), kOnCpu | kOnCuda)      \
  OLMO2_OP(void, rmsnorm_backward, (const TensorView& x, const TensorView& w, float eps, const TensorView& dy,      \
           const TensorView& dx, const TensorView& dw), (x, w, eps, dy, dx, dw), (&x, &w, &dy, &dx, &dw),           \
           kOnCpu | kOnCuda)                                                                                        \
  OLMO2_OP(void, rmsnorm_backward_partials, (const TensorView& x, const TensorView& w, const TensorView& dy,        \
           const TensorView& sumsq, const TensorView& dot), (x, w, dy, sumsq, dot), (&x, &w, &dy, &sumsq, &dot),    \
           kOnCpu | kOnCuda)                                                                                        \
  OLMO2_OP(void, rmsnorm_backward_finish, (const TensorView& x, const TensorView& w, float eps, int64_t d_total,    \
           const TensorView& dy, const TensorView& sumsq, const TensorView& dot, const TensorView& dx,               \
           const TensorView& dw), (x, w, eps, d_total, dy, sumsq, dot, dx, dw),                                     \
           (&x, &w, &dy, &sumsq, &dot, &dx, &dw), kOnCpu | kOnCuda)                                                 \
  OLMO2_OP(void, rope_backward, (const TensorView& dy, const TensorView& positions, int n_heads, int head_dim,      \
           const RopeFrequencies& f), (dy, positions, n_heads, head_dim, f), (&dy, &positions), kOnCpu | kOnCuda)   \
  OLMO2_OP(void, causal_attention_backward, (const TensorView& q, const TensorView& k, const TensorView& v,         \
           const TensorView& dout, int n_heads, int n_kv_heads, const TensorView& dq, const TensorView& dk,         \
           const TensorView& dv, int64_t window), (q, k, v, dout, n_heads, n_kv_heads, dq, dk, dv, window),         \
           (&q, &k, &v, &dout, &dq, &dk, &dv), kOnCpu | kOnCuda)                                                    \
  OLMO2_OP(void, swiglu_backward, (const TensorView& gate, const TensorView& up, const TensorView& dout,            \
           const TensorView& dgate, const TensorView& dup), (gate, up, dout, dgate, dup),                           \
           (&gate, &up, &dout, &dgate, &dup), kOnCpu | kOnCuda)                                                     \
  OLMO2_OP(CrossEntropySums, cross_entropy_zloss, (const TensorView& logits, const TensorView& targets,            \
           float z_coef, float scale, const TensorView& dlogits), (logits, targets, z_coef, scale, dlogits),        \
           (&logits, &targets, &dlogits), kOnCpu | kOnCuda)                                                         \
  OLMO2_OP(void, check_targets, (const TensorView& targets, int64_t vocab_size), (targets, vocab_size),             \
           (&targets), kOnCpu | kOnCuda)                                                                            \
  OLMO2_OP(void, vocab_parallel_ce_row_max, (const TensorView& logits, int64_t real_cols,                          \
           const TensorView& row_max), (logits, real_cols, row_max), (&logits, &row_max), kOnCpu | kOnCuda)        \
  OLMO2_OP(void, vocab_parallel_ce_partials, (const TensorView& logits, int64_t real_cols, int64_t vocab_begin,    \
           const TensorView& targets, const TensorView& row_max, const TensorView& stats,                          \
           const TensorView& dlogits), (logits, real_cols, vocab_begin, targets, row_max, stats, dlogits),         \
           (&logits, &targets, &row_max, &stats, &dlogits), kOnCpu | kOnCuda)                                       \
  OLMO2_OP(CrossEntropySums, vocab_parallel_ce_finish, (const TensorView& row_max, const TensorView& stats,        \
           const TensorView& targets, int64_t vocab_begin, int64_t real_cols, float z_coef, float scale,           \
           const TensorView& dlogits), (row_max, stats, targets, vocab_begin, real_cols, z_coef, scale, dlogits),  \
           (&row_max, &stats, &targets, &dlogits), kOnCpu | kOnCuda)                                                \
  OLMO2_OP(void, top_candidates, (const TensorView& logits, int64_t real_cols, const TensorView& values,           \
           const TensorView& columns, const TensorView& stats), (logits, real_cols, values, columns, stats),        \
           (&logits, &values, &columns, &stats), kOnCpu | kOnCuda)                                                  \
  /* tensor ops and the optimizer */                                                                               \
  OLMO2_OP(void, copy, (const TensorView& src, const TensorView& dst), (src, dst), (kTransfer, &src, &dst), kOnCpu | kOnCuda)  \
  OLMO2_OP(void, fill, (const TensorView& dst, double value), (dst, value), (&dst), kOnCpu | kOnCuda)              \
  OLMO2_OP(void, gather_rows, (const TensorView& src, const TensorView& index, const TensorView& dst),             \
           (src, index, dst), (&src, &index, &dst), kOnCpu | kOnCuda)                                               \
  OLMO2_OP(void, scatter_rows, (const TensorView& src, const TensorView& index, const TensorView& dst),            \
           (src, index, dst), (&src, &index, &dst), kOnCpu | kOnCuda)                                               \
  OLMO2_OP(void, round_to, (const TensorView& x, DType dtype), (x, dtype), (&x), kOnCpu | kOnCuda)                 \
  OLMO2_OP(void, scale, (const TensorView& x, float factor), (x, factor), (&x), kOnCpu | kOnCuda)                  \
  OLMO2_OP(double, sum_squares, (const TensorView& x, double start), (x, start), (&x), kOnCpu | kOnCuda)           \
  OLMO2_OP(double, sum_row_norms, (const TensorView& x), (x), (&x), kOnCpu | kOnCuda)                              \
  OLMO2_OP(void, adamw_step, (const TensorView& param, const TensorView& grad, const TensorView& exp_avg,          \
           const TensorView& exp_avg_sq, const AdamWStep& step), (param, grad, exp_avg, exp_avg_sq, step),          \
           (&param, &grad, &exp_avg, &exp_avg_sq), kOnCpu | kOnCuda)
// clang-format on

/// Declares one row's implementation (inside the backend's namespace).
#define OLMO2_DECLARE_OP(result, name, parameters, arguments, views, devices) result name parameters;

namespace olmo2::ops {

/// Every op of the table as data, in the table's order.
inline constexpr OpTableEntry kOpTable[] = {
#define OLMO2_OP_ENTRY(result, name, parameters, arguments, views, devices) {#name, devices},
    OLMO2_OP_TABLE(OLMO2_OP_ENTRY)
#undef OLMO2_OP_ENTRY
};

}  // namespace olmo2::ops
