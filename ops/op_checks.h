// The argument checks that every backend of an op shares (docs/architecture.md §2, "The
// device seam"): one function per contract, called by the CPU op (ops/cpu/) and the CUDA
// op (ops/cuda/) alike, so both refuse the same arguments with the same error and text.
// They check shapes, dtypes and strides only; the dispatcher (ops/dispatch.cpp) puts every
// view of a call on one device, and each backend keeps its own device check. Where a
// message names a device ("CPU" or "CUDA") it is the view's own.
#pragma once

#include <cstdint>

#include "ops/tensor.h"

namespace olmo2::ops {

/// t is 2-d f32 with contiguous rows. ShapeError "op: name must be a 2-d f32 CPU|CUDA
/// view with contiguous rows, got [shape]" otherwise.
void check_f32_rows(const TensorView& t, const char* op, const char* name);

/// check_f32_rows(b, op, name) and b has a's shape: ShapeError "op: name [b] vs [a]".
void check_same_f32_rows(const TensorView& a, const TensorView& b, const char* op, const char* name);

/// The contract of embedding and embedding_slice (ops/embedding.h): ids [n] contiguous
/// i32, table [V, h] f32 or bf16, out [n, h] f32, last dimensions contiguous.
/// ShapeError "op: ids … , table … , out …" otherwise.
void embedding_check(const char* op, const TensorView& ids, const TensorView& table, const TensorView& out);

/// The contract of embedding_backward and embedding_slice_backward (ops/backward.h):
/// dout [n, h] and dtable [V, h] f32 with contiguous rows (check_f32_rows), ids [n]
/// contiguous i32. ShapeError otherwise.
void embedding_backward_check(const char* op, const TensorView& ids, const TensorView& dout,
                              const TensorView& dtable);

/// Every id[i], i < n (host memory), is in [0, vocab): InputError "token id X at position
/// i is outside the vocabulary [0, vocab)" for the first that is not.
void check_token_ids(const int32_t* id, int64_t n, int64_t vocab);

/// Every target[r], r < n (host memory), is in [0, vocab_size) or kIgnoreIndex:
/// InputError "target X at row r is outside the vocabulary [0, V) and is not the ignore
/// index -100" for the first that is not.
void check_target_values(const int32_t* target, int64_t n, int64_t vocab_size);

/// The layout half of check_targets (ops/backward.h): targets 1-d and contiguous.
/// ShapeError "targets [shape]" otherwise.
void check_targets_layout(const TensorView& targets);

/// The contract of cross_entropy_zloss (ops/backward.h): logits [T, V] f32 with
/// contiguous rows, targets [T] contiguous, dlogits (when set) as logits, V > 0 unless
/// T = 0. ShapeError otherwise. Returns whether the gradient is wanted (dlogits set).
bool cross_entropy_check(const TensorView& logits, const TensorView& targets, const TensorView& dlogits);

/// Logits of the vocab-parallel cross-entropy steps (ops/backward.h): 2-d f32 with
/// contiguous rows, 0 ≤ real_cols ≤ columns. ShapeError otherwise.
void vocab_ce_check_logits(const TensorView& logits, int64_t real_cols);

/// A per-row operand of the vocab-parallel cross-entropy steps: contiguous, `rows`
/// leading rows of `cols` elements, of `dtype`. ShapeError "vocab-parallel
/// cross-entropy: name [shape] dtype for rows rows" otherwise.
void vocab_ce_check_vector(const TensorView& v, int64_t rows, int64_t cols, const char* name, DType dtype);

/// dlogits of vocab_parallel_ce_partials: empty, or f32 of logits' shape with contiguous
/// rows. ShapeError otherwise. Returns whether it is set.
bool vocab_ce_check_partials_grad(const TensorView& dlogits, const TensorView& logits);

/// dlogits of vocab_parallel_ce_finish: empty, or [rows, ≥ real_cols] f32 with
/// contiguous rows. ShapeError otherwise. Returns whether it is set.
bool vocab_ce_check_finish_grad(const TensorView& dlogits, int64_t rows, int64_t real_cols);

/// The contract of causal_attention_backward (ops/backward.h): q, dout, dq [T, H·hd];
/// k, v, dk, dv [S, KV·hd], S ≥ T; all f32 with contiguous rows; H, KV > 0 and KV | H.
/// ShapeError otherwise. Returns hd.
int64_t attention_backward_check(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& dout, int n_heads, int n_kv_heads, const TensorView& dq,
                                 const TensorView& dk, const TensorView& dv);

/// a and b have one 2-d shape with contiguous rows (the element-wise ops, ops/elementwise.h).
/// ShapeError "what: [a] vs [b]" otherwise.
void elementwise_check_same(const TensorView& a, const TensorView& b, const char* what);

/// x is f32 (the f32-only glue ops, ops/tensor_ops.h). ShapeError otherwise.
void check_f32_view(const char* op, const TensorView& x);

/// a and b are 2-d of one width and dtype, with contiguous rows (gather_rows,
/// scatter_rows). ShapeError otherwise.
void check_row_pair(const char* op, const TensorView& a, const TensorView& b);

/// index is a contiguous 1-d i32 view of n entries (gather_rows, scatter_rows).
/// ShapeError otherwise.
void check_index_view(const char* op, const TensorView& index, int64_t n);

/// Every ix[i], i < n (host memory), is in [0, bound): ShapeError "op: index X at i is
/// outside [0, bound)" for the first that is not.
void check_index_values(const char* op, const int32_t* ix, int64_t n, int64_t bound);

/// No value occurs twice among ix[0 … n) (host memory): ShapeError "op: index X at i
/// repeats the one at j" otherwise. scatter_rows needs it: two rows written to one
/// destination are last-writer-wins on the CPU and a race on a GPU.
void check_index_distinct(const char* op, const int32_t* ix, int64_t n);

}  // namespace olmo2::ops
