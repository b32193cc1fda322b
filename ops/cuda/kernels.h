// The CUDA implementations of every op in ops/, with the CPU ones' signatures and
// contracts (ops/cpu/kernels.h, and each op's header). The dispatcher (ops/dispatch.cpp)
// calls them for views on Device::CUDA. Kernels are enqueued on the compute stream
// (ops/cuda/runtime.h) and return before they finish; the ops that return a host value
// (sum_squares, sum_row_norms, causal_attention_max_logit, the cross-entropy sums) and
// copies to host memory wait for the stream. Every CUDA/cuBLAS failure throws Error
// naming the call (ops/cuda/check.h). Only in builds with CUDA (OLMO2_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/paged_attention.h"
#include "ops/rope.h"
#include "ops/tensor.h"

namespace olmo2::ops::cuda {


void linear(const TensorView& x, const TensorView& w, const TensorView& y);
void linear_batch_invariant(const TensorView& x, const TensorView& w, const TensorView& y);
void embedding(const TensorView& ids, const TensorView& table, const TensorView& out);
void embedding_slice(const TensorView& ids, const TensorView& table, int64_t first_id, const TensorView& out);
void rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& y);
void rmsnorm_partials(const TensorView& x, const TensorView& sumsq);
void rmsnorm_apply(const TensorView& x, const TensorView& w, const TensorView& sumsq, int64_t d_total, float eps,
                   const TensorView& y);
void rope(const TensorView& x, const TensorView& positions, int n_heads, int head_dim, const RopeFrequencies& f);
void causal_attention(const TensorView& q, const TensorView& k, const TensorView& v, int n_heads, int n_kv_heads,
                      const TensorView& out, DType act, int64_t window);
float causal_attention_max_logit(const TensorView& q, const TensorView& k, int n_heads, int n_kv_heads,
                                 int64_t window);
void paged_attention(const TensorView& q, const TensorView& k_pool, const TensorView& v_pool, int64_t block_size,
                     const std::vector<PagedSequence>& sequences, int n_heads, int n_kv_heads, const TensorView& out,
                     DType act, int64_t window);
void swiglu(const TensorView& gate, const TensorView& up, const TensorView& out, DType act);
void add_inplace(const TensorView& y, const TensorView& x, DType act);

void linear_backward(const TensorView& x, const TensorView& w, const TensorView& dy, const TensorView& dx,
                     const TensorView& dw, bool accumulate_dw, bool accumulate_dx);
void embedding_backward(const TensorView& ids, const TensorView& dout, const TensorView& dtable);
void embedding_slice_backward(const TensorView& ids, const TensorView& dout, int64_t first_id,
                              const TensorView& dtable);
void rmsnorm_backward(const TensorView& x, const TensorView& w, float eps, const TensorView& dy,
                      const TensorView& dx, const TensorView& dw);
void rmsnorm_backward_partials(const TensorView& x, const TensorView& w, const TensorView& dy,
                               const TensorView& sumsq, const TensorView& dot);
void rmsnorm_backward_finish(const TensorView& x, const TensorView& w, float eps, int64_t d_total,
                             const TensorView& dy, const TensorView& sumsq, const TensorView& dot,
                             const TensorView& dx, const TensorView& dw);
void rope_backward(const TensorView& dy, const TensorView& positions, int n_heads, int head_dim,
                   const RopeFrequencies& f);
void causal_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& dout,
                               int n_heads, int n_kv_heads, const TensorView& dq, const TensorView& dk,
                               const TensorView& dv, int64_t window);
void swiglu_backward(const TensorView& gate, const TensorView& up, const TensorView& dout, const TensorView& dgate,
                     const TensorView& dup);
CrossEntropySums cross_entropy_zloss(const TensorView& logits, const TensorView& targets, float z_coef, float scale,
                                     const TensorView& dlogits);
void check_targets(const TensorView& targets, int64_t vocab_size);
void vocab_parallel_ce_row_max(const TensorView& logits, int64_t real_cols, const TensorView& row_max);
void vocab_parallel_ce_partials(const TensorView& logits, int64_t real_cols, int64_t vocab_begin,
                                const TensorView& targets, const TensorView& row_max, const TensorView& stats,
                                const TensorView& dlogits);
CrossEntropySums vocab_parallel_ce_finish(const TensorView& row_max, const TensorView& stats,
                                          const TensorView& targets, int64_t vocab_begin, int64_t real_cols,
                                          float z_coef, float scale, const TensorView& dlogits);
void top_candidates(const TensorView& logits, int64_t real_cols, const TensorView& values, const TensorView& columns,
                    const TensorView& stats);

void copy(const TensorView& src, const TensorView& dst);
void fill(const TensorView& dst, double value);
void gather_rows(const TensorView& src, const TensorView& index, const TensorView& dst);
void scatter_rows(const TensorView& src, const TensorView& index, const TensorView& dst);
void round_to(const TensorView& x, DType dtype);
void scale(const TensorView& x, float factor);
double sum_squares(const TensorView& x, double start);
double sum_row_norms(const TensorView& x);
void adamw_step(const TensorView& param, const TensorView& grad, const TensorView& exp_avg,
                const TensorView& exp_avg_sq, const AdamWStep& step);

}  // namespace olmo2::ops::cuda
