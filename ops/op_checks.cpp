// The shared argument checks of the ops (ops/op_checks.h).
#include "ops/op_checks.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/backward.h"

namespace olmo2::ops {
namespace {
const char* device_word(Device d) { return d == Device::CPU ? "CPU" : "CUDA"; }
}  // namespace

void check_f32_rows(const TensorView& t, const char* op, const char* name) {
  OLMO2_CHECK(t.dim() == 2 && t.dtype() == DType::F32 && t.stride(1) == 1, op, ": ", name, " must be a 2-d f32 ",
              device_word(t.device()), " view with contiguous rows, got ", t.shape_str());
}

void check_same_f32_rows(const TensorView& a, const TensorView& b, const char* op, const char* name) {
  check_f32_rows(b, op, name);
  OLMO2_CHECK(a.shape() == b.shape(), op, ": ", name, " ", b.shape_str(), " vs ", a.shape_str());
}

void embedding_check(const char* op, const TensorView& ids, const TensorView& table, const TensorView& out) {
  OLMO2_CHECK(ids.dim() == 1 && ids.dtype() == DType::I32 && ids.stride(0) == 1 && table.dim() == 2 &&
                  out.dim() == 2 && out.size(0) == ids.size(0) && out.size(1) == table.size(1) &&
                  table.stride(1) == 1 && out.stride(1) == 1 &&
                  (table.dtype() == DType::F32 || table.dtype() == DType::BF16) && out.dtype() == DType::F32,
              op, ": ids ", ids.shape_str(), " ", dtype_name(ids.dtype()), ", table ", table.shape_str(), " ",
              dtype_name(table.dtype()), ", out ", out.shape_str(), " ", dtype_name(out.dtype()));
}

void embedding_backward_check(const char* op, const TensorView& ids, const TensorView& dout,
                              const TensorView& dtable) {
  check_f32_rows(dout, op, "dout");
  check_f32_rows(dtable, op, "dtable");
  OLMO2_CHECK(ids.dim() == 1 && ids.dtype() == DType::I32 && ids.stride(0) == 1 && dout.size(0) == ids.size(0) &&
                  dout.size(1) == dtable.size(1),
              op, ": ids ", ids.shape_str(), " dout ", dout.shape_str(), " dtable ", dtable.shape_str());
}

void check_token_ids(const int32_t* id, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    if (id[i] < 0 || id[i] >= vocab) {
      OLMO2_THROW(InputError, "token id ", id[i], " at position ", i, " is outside the vocabulary [0, ", vocab, ")");
    }
  }
}

void check_target_values(const int32_t* target, int64_t n, int64_t vocab_size) {
  for (int64_t r = 0; r < n; ++r) {
    const int32_t t = target[r];
    if (t != kIgnoreIndex && (t < 0 || t >= vocab_size)) {
      OLMO2_THROW(InputError, "target ", t, " at row ", r, " is outside the vocabulary [0, ", vocab_size,
                  ") and is not the ignore index ", kIgnoreIndex);
    }
  }
}

void check_targets_layout(const TensorView& targets) {
  OLMO2_CHECK(targets.dim() == 1 && targets.stride(0) == 1, "targets ", targets.shape_str());
}

bool cross_entropy_check(const TensorView& logits, const TensorView& targets, const TensorView& dlogits) {
  check_f32_rows(logits, "cross_entropy_zloss", "logits");
  OLMO2_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0) && targets.stride(0) == 1,
              "cross_entropy_zloss: targets ", targets.shape_str(), " for logits ", logits.shape_str());
  const bool want_grad = !dlogits.empty();
  if (want_grad) check_same_f32_rows(logits, dlogits, "cross_entropy_zloss", "dlogits");
  OLMO2_CHECK(logits.size(1) > 0 || logits.size(0) == 0, "cross_entropy_zloss: empty vocabulary");
  return want_grad;
}

void vocab_ce_check_logits(const TensorView& logits, int64_t real_cols) {
  OLMO2_CHECK(logits.dim() == 2 && logits.dtype() == DType::F32 && logits.stride(1) == 1,
              "vocab-parallel cross-entropy: logits must be a 2-d f32 view with contiguous rows, got ",
              logits.shape_str());
  OLMO2_CHECK(real_cols >= 0 && real_cols <= logits.size(1), "vocab-parallel cross-entropy: real columns ",
              real_cols, " outside [0, ", logits.size(1), "]");
}

void vocab_ce_check_vector(const TensorView& v, int64_t rows, int64_t cols, const char* name, DType dtype) {
  OLMO2_CHECK(v.is_contiguous() && v.numel() == rows * cols && v.dim() >= 1 && v.size(0) == rows &&
                  v.dtype() == dtype,
              "vocab-parallel cross-entropy: ", name, " ", v.shape_str(), " ", dtype_name(v.dtype()), " for ", rows,
              " rows");
}

bool vocab_ce_check_partials_grad(const TensorView& dlogits, const TensorView& logits) {
  const bool want_grad = !dlogits.empty();
  OLMO2_CHECK(!want_grad || (dlogits.shape() == logits.shape() && dlogits.dtype() == DType::F32 &&
                             dlogits.stride(1) == 1),
              "vocab-parallel cross-entropy: dlogits ", dlogits.shape_str(), " for logits ", logits.shape_str());
  return want_grad;
}

bool vocab_ce_check_finish_grad(const TensorView& dlogits, int64_t rows, int64_t real_cols) {
  const bool want_grad = !dlogits.empty();
  OLMO2_CHECK(!want_grad || (dlogits.dim() == 2 && dlogits.size(0) == rows && dlogits.size(1) >= real_cols &&
                             dlogits.stride(1) == 1 && dlogits.dtype() == DType::F32),
              "vocab-parallel cross-entropy: dlogits ", dlogits.shape_str(), " for ", rows, " rows");
  return want_grad;
}

int64_t attention_backward_check(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& dout, int n_heads, int n_kv_heads, const TensorView& dq,
                                 const TensorView& dk, const TensorView& dv) {
  const char* op = "causal_attention_backward";
  check_f32_rows(q, op, "q");
  check_f32_rows(k, op, "k");
  check_same_f32_rows(q, dout, op, "dout");
  check_same_f32_rows(q, dq, op, "dq");
  check_same_f32_rows(k, v, op, "v");
  check_same_f32_rows(k, dk, op, "dk");
  check_same_f32_rows(k, dv, op, "dv");
  OLMO2_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, op, ": heads ", n_heads, " kv heads ",
              n_kv_heads);
  const int64_t hd = q.size(1) / n_heads;
  OLMO2_CHECK(q.size(1) == hd * n_heads && k.size(1) == hd * n_kv_heads && k.size(0) >= q.size(0), op, ": q ",
              q.shape_str(), " k ", k.shape_str(), " heads ", n_heads, "/", n_kv_heads);
  return hd;
}

void elementwise_check_same(const TensorView& a, const TensorView& b, const char* what) {
  OLMO2_CHECK(a.shape() == b.shape() && a.dim() == 2 && a.stride(1) == 1 && b.stride(1) == 1, what, ": ",
              a.shape_str(), " vs ", b.shape_str());
}

void check_f32_view(const char* op, const TensorView& x) {
  OLMO2_CHECK(x.dtype() == DType::F32, op, ": expected an f32 view, got ", dtype_name(x.dtype()), " ",
              x.shape_str());
}

void check_row_pair(const char* op, const TensorView& a, const TensorView& b) {
  OLMO2_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1) && a.dtype() == b.dtype() &&
                  a.stride(1) == 1 && b.stride(1) == 1,
              op, ": ", a.shape_str(), " ", dtype_name(a.dtype()), " and ", b.shape_str(), " ", dtype_name(b.dtype()));
}

void check_index_view(const char* op, const TensorView& index, int64_t n) {
  OLMO2_CHECK(index.dim() == 1 && index.dtype() == DType::I32 && index.size(0) == n && index.stride(0) == 1, op,
              ": index ", index.shape_str(), " ", dtype_name(index.dtype()), " for ", n, " rows");
}

void check_index_distinct(const char* op, const int32_t* ix, int64_t n) {
  std::vector<std::pair<int32_t, int64_t>> sorted(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) sorted[static_cast<size_t>(i)] = {ix[i], i};
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 1; k < sorted.size(); ++k) {
    if (sorted[k].first == sorted[k - 1].first) {
      OLMO2_THROW(ShapeError, op, ": index ", sorted[k].first, " at ", sorted[k].second, " repeats the one at ",
                  sorted[k - 1].second, " (two rows would be written to one destination row)");
    }
  }
}

void check_index_values(const char* op, const int32_t* ix, int64_t n, int64_t bound) {
  for (int64_t i = 0; i < n; ++i) {
    OLMO2_CHECK(ix[i] >= 0 && ix[i] < bound, op, ": index ", ix[i], " at ", i, " is outside [0, ", bound, ")");
  }
}

}  // namespace olmo2::ops
