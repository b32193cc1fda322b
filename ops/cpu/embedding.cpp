#include "ops/embedding.h"

#include <cstring>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/backward.h"
#include "ops/cpu/checks.h"
#include "ops/op_checks.h"

namespace olmo2::ops {
namespace {
void check(const char* op, const TensorView& ids, const TensorView& table, const TensorView& out) {
  embedding_check(op, ids, table, out);
  OLMO2_CHECK(table.device() == Device::CPU && out.device() == Device::CPU, op, ": views not on the CPU");
}

// Row r of the table into `dst` as f32: a copy, or an exact widening from bf16.
void copy_row(const TensorView& table, int64_t r, float* dst) {
  const int64_t h = table.size(1);
  if (table.dtype() == DType::F32) {
    std::memcpy(dst, table.f32() + r * table.stride(0), sizeof(float) * h);
    return;
  }
  const auto* src = static_cast<const uint16_t*>(table.data()) + r * table.stride(0);
  for (int64_t j = 0; j < h; ++j) dst[j] = bf16_to_f32(src[j]);
}
}  // namespace

void cpu::embedding(const TensorView& ids, const TensorView& table, const TensorView& out) {
  check("embedding", ids, table, out);
  const int64_t n = ids.size(0), vocab = table.size(0), h = table.size(1);
  const int32_t* id = ids.i32();
  check_token_ids(id, n, vocab);
  float* o = out.f32();
#pragma omp parallel for schedule(static) if (n * h > (1 << 16))
  for (int64_t i = 0; i < n; ++i) copy_row(table, id[i], o + i * out.stride(0));
}

void cpu::embedding_slice(const TensorView& ids, const TensorView& table, int64_t first_id, const TensorView& out) {
  check("embedding_slice", ids, table, out);
  const int64_t n = ids.size(0), rows = table.size(0), h = table.size(1);
  const int32_t* id = ids.i32();
  float* o = out.f32();
#pragma omp parallel for schedule(static) if (n * h > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = static_cast<int64_t>(id[i]) - first_id;
    if (r >= 0 && r < rows) {
      copy_row(table, r, o + i * out.stride(0));
    } else {
      std::memset(o + i * out.stride(0), 0, sizeof(float) * h);
    }
  }
}

namespace {
// dtable[ids[i] − first_id] += dout[i] for the ids in the table's range, in increasing i.
// Threads split the columns, so repeated ids never race; each thread walks all tokens.
void embedding_rows_backward(const char* op, const TensorView& ids, const TensorView& dout, int64_t first_id,
                             const TensorView& dtable, bool all_in_range) {
  embedding_backward_check(op, ids, dout, dtable);
  OLMO2_CHECK(dout.device() == Device::CPU && dtable.device() == Device::CPU, op, ": views not on the CPU");
  const int64_t n = ids.size(0), rows = dtable.size(0), h = dtable.size(1);
  const int32_t* id = ids.i32();
  if (all_in_range) check_token_ids(id, n, rows);
  const int64_t chunk = 256;
  const int64_t n_chunks = (h + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n * h > (1 << 16) && n_chunks > 1)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t lo = c * chunk, hi = std::min(h, lo + chunk);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = static_cast<int64_t>(id[i]) - first_id;
      if (r < 0 || r >= rows) continue;
      const float* src = dout.f32() + i * dout.stride(0);
      float* dst = dtable.f32() + r * dtable.stride(0);
      for (int64_t j = lo; j < hi; ++j) dst[j] += src[j];
    }
  }
}
}  // namespace

void cpu::embedding_backward(const TensorView& ids, const TensorView& dout, const TensorView& dtable) {
  embedding_rows_backward("embedding_backward", ids, dout, 0, dtable, true);
}

void cpu::embedding_slice_backward(const TensorView& ids, const TensorView& dout, int64_t first_id,
                                   const TensorView& dtable) {
  embedding_rows_backward("embedding_slice_backward", ids, dout, first_id, dtable, false);
}

}  // namespace olmo2::ops
