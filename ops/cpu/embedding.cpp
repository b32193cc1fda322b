#include "ops/embedding.h"

#include <cstring>

#include "ops/cpu/kernels.h"
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

}  // namespace olmo2::ops
