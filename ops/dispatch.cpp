// Every public op of ops/, dispatched on the device of its views — the one place where
// ops choose a backend (docs/architecture.md §2). A backend adds its implementations in
// ops/<backend>/ with the CPU ones' signatures (ops/cpu/kernels.h) and a case here; an op
// it lacks fails with a ShapeError naming the op and the device, never a wrong result.
#include "core/error.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/cpu/kernels.h"
#include "ops/device_emulation.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/paged_attention.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/tensor_ops.h"
#include "ops/top_candidates.h"
#ifdef OLMO2_HAVE_CUDA
#include "ops/cuda/kernels.h"
#endif

namespace olmo2::ops {
namespace {

/// The device every non-empty view of an op is on; ShapeError naming the op when they
/// differ. Empty views (skipped outputs) do not count; when every view is empty, the
/// first view's device (an op on empty GPU tensors runs the GPU op, which does nothing).
Device device_of(const char* op, std::initializer_list<const TensorView*> views) {
  bool seen = false;
  Device d = views.size() > 0 ? (*views.begin())->device() : Device::CPU;
  for (const TensorView* v : views) {
    if (v->empty()) continue;
    if (seen && v->device() != d) {
      OLMO2_THROW(ShapeError, "ops::", op, ": views on different devices (", device_name(d), " and ",
                  device_name(v->device()), ")");
    }
    d = v->device(), seen = true;
  }
  return d;
}

#ifndef OLMO2_HAVE_CUDA
[[noreturn]] void no_backend(const char* op, Device d) {
  OLMO2_THROW(ShapeError, "ops::", op, " has no ", device_name(d), " implementation (this build has no CUDA backend)");
}
#endif

}  // namespace

// One line per op: the CPU implementation, the CPU one on re-flagged views for an
// emulated device (ops/device_emulation.h), or the CUDA one for views on the GPU. In a
// build without CUDA a GPU view exists only under emulation (Buffer refuses to allocate
// one otherwise), and the named refusal says so should one be made by hand.
#define OLMO2_EMULATED(op, ...) \
  call_on_host([](const auto&... a_) { return cpu::op(a_...); }, __VA_ARGS__)
#ifdef OLMO2_HAVE_CUDA
#define OLMO2_DISPATCH(op, views, ...)               \
  do {                                               \
    const Device d_ = device_of(#op, std::initializer_list<const TensorView*> views); \
    if (d_ == Device::CPU) return cpu::op(__VA_ARGS__); \
    if (device_emulated()) return OLMO2_EMULATED(op, __VA_ARGS__); \
    return cuda::op(__VA_ARGS__);                    \
  } while (0)
#else
#define OLMO2_DISPATCH(op, views, ...)               \
  do {                                               \
    const Device d_ = device_of(#op, std::initializer_list<const TensorView*> views); \
    if (d_ == Device::CPU) return cpu::op(__VA_ARGS__); \
    if (device_emulated()) return OLMO2_EMULATED(op, __VA_ARGS__); \
    no_backend(#op, d_);                             \
  } while (0)
#endif

void linear(const TensorView& x, const TensorView& w, const TensorView& y) {
  OLMO2_DISPATCH(linear, ({&x, &w, &y}), x, w, y);
}
void linear_batch_invariant(const TensorView& x, const TensorView& w, const TensorView& y) {
  OLMO2_DISPATCH(linear_batch_invariant, ({&x, &w, &y}), x, w, y);
}
void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) {
  OLMO2_DISPATCH(embedding, ({&ids, &table, &out}), ids, table, out);
}
void embedding_slice(const TensorView& ids, const TensorView& table, int64_t first_id, const TensorView& out) {
  OLMO2_DISPATCH(embedding_slice, ({&ids, &table, &out}), ids, table, first_id, out);
}
void rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& y) {
  OLMO2_DISPATCH(rmsnorm, ({&x, &w, &y}), x, w, eps, y);
}
void rmsnorm_partials(const TensorView& x, const TensorView& sumsq) {
  OLMO2_DISPATCH(rmsnorm_partials, ({&x, &sumsq}), x, sumsq);
}
void rmsnorm_apply(const TensorView& x, const TensorView& w, const TensorView& sumsq, int64_t d_total, float eps,
                   const TensorView& y) {
  OLMO2_DISPATCH(rmsnorm_apply, ({&x, &w, &sumsq, &y}), x, w, sumsq, d_total, eps, y);
}
void rope(const TensorView& x, const TensorView& positions, int n_heads, int head_dim, const RopeFrequencies& f) {
  OLMO2_DISPATCH(rope, ({&x, &positions}), x, positions, n_heads, head_dim, f);
}
void causal_attention(const TensorView& q, const TensorView& k, const TensorView& v, int n_heads, int n_kv_heads,
                      const TensorView& out, DType act, int64_t window) {
  OLMO2_DISPATCH(causal_attention, ({&q, &k, &v, &out}), q, k, v, n_heads, n_kv_heads, out, act, window);
}
float causal_attention_max_logit(const TensorView& q, const TensorView& k, int n_heads, int n_kv_heads,
                                 int64_t window) {
  OLMO2_DISPATCH(causal_attention_max_logit, ({&q, &k}), q, k, n_heads, n_kv_heads, window);
}
void paged_attention(const TensorView& q, const TensorView& k_pool, const TensorView& v_pool, int64_t block_size,
                     const std::vector<PagedSequence>& sequences, int n_heads, int n_kv_heads, const TensorView& out,
                     DType act, int64_t window) {
  OLMO2_DISPATCH(paged_attention, ({&q, &k_pool, &v_pool, &out}), q, k_pool, v_pool, block_size, sequences, n_heads,
                 n_kv_heads, out, act, window);
}
void swiglu(const TensorView& gate, const TensorView& up, const TensorView& out, DType act) {
  OLMO2_DISPATCH(swiglu, ({&gate, &up, &out}), gate, up, out, act);
}
void add_inplace(const TensorView& y, const TensorView& x, DType act) {
  OLMO2_DISPATCH(add_inplace, ({&y, &x}), y, x, act);
}

void linear_backward(const TensorView& x, const TensorView& w, const TensorView& dy, const TensorView& dx,
                     const TensorView& dw, bool accumulate_dw, bool accumulate_dx) {
  OLMO2_DISPATCH(linear_backward, ({&x, &w, &dy, &dx, &dw}), x, w, dy, dx, dw, accumulate_dw, accumulate_dx);
}
void embedding_backward(const TensorView& ids, const TensorView& dout, const TensorView& dtable) {
  OLMO2_DISPATCH(embedding_backward, ({&ids, &dout, &dtable}), ids, dout, dtable);
}
void embedding_slice_backward(const TensorView& ids, const TensorView& dout, int64_t first_id,
                              const TensorView& dtable) {
  OLMO2_DISPATCH(embedding_slice_backward, ({&ids, &dout, &dtable}), ids, dout, first_id, dtable);
}
void rmsnorm_backward(const TensorView& x, const TensorView& w, float eps, const TensorView& dy, const TensorView& dx,
                      const TensorView& dw) {
  OLMO2_DISPATCH(rmsnorm_backward, ({&x, &w, &dy, &dx, &dw}), x, w, eps, dy, dx, dw);
}
void rmsnorm_backward_partials(const TensorView& x, const TensorView& w, const TensorView& dy,
                               const TensorView& sumsq, const TensorView& dot) {
  OLMO2_DISPATCH(rmsnorm_backward_partials, ({&x, &w, &dy, &sumsq, &dot}), x, w, dy, sumsq, dot);
}
void rmsnorm_backward_finish(const TensorView& x, const TensorView& w, float eps, int64_t d_total,
                             const TensorView& dy, const TensorView& sumsq, const TensorView& dot,
                             const TensorView& dx, const TensorView& dw) {
  OLMO2_DISPATCH(rmsnorm_backward_finish, ({&x, &w, &dy, &sumsq, &dot, &dx, &dw}), x, w, eps, d_total, dy, sumsq,
                 dot, dx, dw);
}
void rope_backward(const TensorView& dy, const TensorView& positions, int n_heads, int head_dim,
                   const RopeFrequencies& f) {
  OLMO2_DISPATCH(rope_backward, ({&dy, &positions}), dy, positions, n_heads, head_dim, f);
}
void causal_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& dout,
                               int n_heads, int n_kv_heads, const TensorView& dq, const TensorView& dk,
                               const TensorView& dv, int64_t window) {
  OLMO2_DISPATCH(causal_attention_backward, ({&q, &k, &v, &dout, &dq, &dk, &dv}), q, k, v, dout, n_heads, n_kv_heads,
                 dq, dk, dv, window);
}
void swiglu_backward(const TensorView& gate, const TensorView& up, const TensorView& dout, const TensorView& dgate,
                     const TensorView& dup) {
  OLMO2_DISPATCH(swiglu_backward, ({&gate, &up, &dout, &dgate, &dup}), gate, up, dout, dgate, dup);
}
CrossEntropySums cross_entropy_zloss(const TensorView& logits, const TensorView& targets, float z_coef, float scale,
                                     const TensorView& dlogits) {
  OLMO2_DISPATCH(cross_entropy_zloss, ({&logits, &targets, &dlogits}), logits, targets, z_coef, scale, dlogits);
}
void check_targets(const TensorView& targets, int64_t vocab_size) {
  OLMO2_DISPATCH(check_targets, ({&targets}), targets, vocab_size);
}
void vocab_parallel_ce_row_max(const TensorView& logits, int64_t real_cols, const TensorView& row_max) {
  OLMO2_DISPATCH(vocab_parallel_ce_row_max, ({&logits, &row_max}), logits, real_cols, row_max);
}
void vocab_parallel_ce_partials(const TensorView& logits, int64_t real_cols, int64_t vocab_begin,
                                const TensorView& targets, const TensorView& row_max, const TensorView& stats,
                                const TensorView& dlogits) {
  OLMO2_DISPATCH(vocab_parallel_ce_partials, ({&logits, &targets, &row_max, &stats, &dlogits}), logits, real_cols,
                 vocab_begin, targets, row_max, stats, dlogits);
}
CrossEntropySums vocab_parallel_ce_finish(const TensorView& row_max, const TensorView& stats,
                                          const TensorView& targets, int64_t vocab_begin, int64_t real_cols,
                                          float z_coef, float scale, const TensorView& dlogits) {
  OLMO2_DISPATCH(vocab_parallel_ce_finish, ({&row_max, &stats, &targets, &dlogits}), row_max, stats, targets,
                 vocab_begin, real_cols, z_coef, scale, dlogits);
}
void top_candidates(const TensorView& logits, int64_t real_cols, const TensorView& values, const TensorView& columns,
                    const TensorView& stats) {
  OLMO2_DISPATCH(top_candidates, ({&logits, &values, &columns, &stats}), logits, real_cols, values, columns, stats);
}

void copy(const TensorView& src, const TensorView& dst) {
  // The one op whose views may lie on two devices: a host <-> device transfer is the
  // CUDA backend's (docs/architecture.md §2).
  if (src.device() == Device::CPU && dst.device() == Device::CPU) return cpu::copy(src, dst);
  if (device_emulated()) return cpu::copy(emulated_host_view(src), emulated_host_view(dst));
#ifdef OLMO2_HAVE_CUDA
  return cuda::copy(src, dst);
#else
  no_backend("copy", src.device() == Device::CPU ? dst.device() : src.device());
#endif
}
void fill(const TensorView& dst, double value) { OLMO2_DISPATCH(fill, ({&dst}), dst, value); }
void gather_rows(const TensorView& src, const TensorView& index, const TensorView& dst) {
  OLMO2_DISPATCH(gather_rows, ({&src, &index, &dst}), src, index, dst);
}
void scatter_rows(const TensorView& src, const TensorView& index, const TensorView& dst) {
  OLMO2_DISPATCH(scatter_rows, ({&src, &index, &dst}), src, index, dst);
}
void round_to(const TensorView& x, DType dtype) { OLMO2_DISPATCH(round_to, ({&x}), x, dtype); }
void scale(const TensorView& x, float factor) { OLMO2_DISPATCH(scale, ({&x}), x, factor); }
double sum_squares(const TensorView& x, double start) { OLMO2_DISPATCH(sum_squares, ({&x}), x, start); }
double sum_row_norms(const TensorView& x) { OLMO2_DISPATCH(sum_row_norms, ({&x}), x); }
void adamw_step(const TensorView& param, const TensorView& grad, const TensorView& exp_avg,
                const TensorView& exp_avg_sq, const AdamWStep& step) {
  OLMO2_DISPATCH(adamw_step, ({&param, &grad, &exp_avg, &exp_avg_sq}), param, grad, exp_avg, exp_avg_sq, step);
}

}  // namespace olmo2::ops
