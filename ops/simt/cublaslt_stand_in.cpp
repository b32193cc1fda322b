// The cuBLASLt stand-in (ops/simt/include/cublasLt.h): descriptors and layouts kept as
// cuBLASLt documents them, and cublasLtMatmul computed by a reference product that reads
// A, B, C and D only through those layouts, so a wrong order, size, leading dimension or
// transpose in our mapping gives a wrong result or a refusal (docs/architecture.md §10).
#include <cublasLt.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/simt/bf16_bits.h"
#include "ops/simt/cuda_runtime_stand_in.h"

struct cublasLtContext {
  int unused = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
  int order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t batch_stride = 0;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
};

namespace {

size_t element_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
bool supported(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }

template <typename T>
bool read_attr(const void* buf, size_t size, T* out) {
  if (buf == nullptr || size != sizeof(T)) return false;
  std::memcpy(out, buf, sizeof(T));
  return true;
}

/// Where element (r, c) of a stored matrix is, in elements, by its layout's order and ld.
uint64_t offset(const cublasLtMatrixLayoutOpaque_t& l, uint64_t r, uint64_t c) {
  const uint64_t ld = static_cast<uint64_t>(l.ld);
  return l.order == CUBLASLT_ORDER_COL ? r + c * ld : r * ld + c;
}

/// Element (r, c) of a stored matrix, as f32 (bf16 widened exactly).
float load(const void* base, const cublasLtMatrixLayoutOpaque_t& l, uint64_t r, uint64_t c) {
  const uint64_t at = offset(l, r, c);
  if (l.type == CUDA_R_32F) return static_cast<const float*>(base)[at];
  return olmo2::simt::bf16_widen_bits(static_cast<const uint16_t*>(base)[at]);
}

/// Stores `v` at element (r, c), rounded to the layout's type.
void store(void* base, const cublasLtMatrixLayoutOpaque_t& l, uint64_t r, uint64_t c, float v) {
  const uint64_t at = offset(l, r, c);
  if (l.type == CUDA_R_32F) static_cast<float*>(base)[at] = v;
  else static_cast<uint16_t*>(base)[at] = olmo2::simt::bf16_round_bits(v);
}

/// The bytes a layout spans from its first element (for the bounds check).
uint64_t span_bytes(const cublasLtMatrixLayoutOpaque_t& l) {
  const uint64_t major = l.order == CUBLASLT_ORDER_COL ? l.cols : l.rows, minor = l.order == CUBLASLT_ORDER_COL ? l.rows : l.cols;
  if (major == 0 || minor == 0) return 0;
  return ((major - 1) * static_cast<uint64_t>(l.ld) + minor) * element_bytes(l.type);
}

bool valid(const cublasLtMatrixLayoutOpaque_t* l) {
  if (l == nullptr || !supported(l->type) || l->batch != 1) return false;
  const uint64_t minor = l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols;
  return l->ld >= 1 && static_cast<uint64_t>(l->ld) >= minor;
}

/// The problem's m, n, k when the layouts agree with each other and the transposes.
bool shape(const cublasLtMatmulDescOpaque_t* d, const cublasLtMatrixLayoutOpaque_t* a,
           const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c,
           const cublasLtMatrixLayoutOpaque_t* dd, uint64_t* m, uint64_t* n, uint64_t* k) {
  if (d == nullptr || !valid(a) || !valid(b) || !valid(c) || !valid(dd)) return false;
  if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) return false;
  const bool ta = d->trans_a == CUBLAS_OP_T, tb = d->trans_b == CUBLAS_OP_T;
  *m = ta ? a->cols : a->rows;
  *k = ta ? a->rows : a->cols;
  const uint64_t kb = tb ? b->cols : b->rows;
  *n = tb ? b->rows : b->cols;
  return kb == *k && dd->rows == *m && dd->cols == *n && c->rows == *m && c->cols == *n && c->type == dd->type &&
         dd->type == CUDA_R_32F;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasLtGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "refused by the cuBLASLt stand-in of the SIMT executor";
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_ORDER: ok = read_attr(buf, size, &l->order); break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: ok = read_attr(buf, size, &l->batch); break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: ok = read_attr(buf, size, &l->batch_stride); break;
    case CUBLASLT_MATRIX_LAYOUT_LD: ok = read_attr(buf, size, &l->ld); break;
    default: ok = false;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  *desc = new cublasLtMatmulDescOpaque_t{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  int32_t op = 0;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (!read_attr(buf, size, &op) || (op != CUBLAS_OP_N && op != CUBLAS_OP_T)) return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->trans_a : d->trans_b) = op;
      return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
    return read_attr(buf, size, &pref->max_workspace) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  uint32_t align = 0;
  if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
    return read_attr(buf, size, &align) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  uint64_t m, n, k;
  if (requested < 1 || !shape(desc, a, b, c, d, &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
  // Two algorithms, both the reference product: id 1 and id 2 (split-K 1, no reduction).
  const int count = requested < 2 ? requested : 2;
  for (int i = 0; i < count; ++i) {
    results[i] = cublasLtMatmulHeuristicResult_t{};
    results[i].algo.data[0] = static_cast<uint64_t>(i + 1);
    results[i].algo.data[1] = 1;
    results[i].state = CUBLAS_STATUS_SUCCESS;
    results[i].wavesCount = 1.0f;
  }
  *returned = count;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                       cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                       const cublasLtMatmulAlgo_t* algo, cublasLtMatmulHeuristicResult_t* result) {
  uint64_t m, n, k;
  if (algo == nullptr || algo->data[0] == 0 || !shape(desc, a, b, c, d, &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
  *result = cublasLtMatmulHeuristicResult_t{};
  result->algo = *algo;
  result->state = CUBLAS_STATUS_SUCCESS;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    const void* buf, size_t size) {
  int32_t split = 0;
  uint32_t scheme = 0;
  switch (attr) {
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM:
      if (!read_attr(buf, size, &split) || split < 1) return CUBLAS_STATUS_INVALID_VALUE;
      algo->data[1] = static_cast<uint64_t>(split);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME:
      if (!read_attr(buf, size, &scheme)) return CUBLAS_STATUS_INVALID_VALUE;
      algo->data[2] = scheme;
      return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t a_desc, const void* b, cublasLtMatrixLayout_t b_desc,
                              const void* beta, const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t*, void*, size_t,
                              cudaStream_t stream) {
  uint64_t m, n, k;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (alpha == nullptr || beta == nullptr || !shape(desc, a_desc, b_desc, c_desc, d_desc, &m, &n, &k))
    return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  // Every operand must lie inside device memory, as its layout spans it.
  if ((k > 0 && m > 0 && !olmo2::simt::is_device_range(a, span_bytes(*a_desc))) ||
      (k > 0 && n > 0 && !olmo2::simt::is_device_range(b, span_bytes(*b_desc))) ||
      (be != 0.0f && !olmo2::simt::is_device_range(c, span_bytes(*c_desc))) ||
      !olmo2::simt::is_device_range(d, span_bytes(*d_desc)))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = desc->trans_a == CUBLAS_OP_T, tb = desc->trans_b == CUBLAS_OP_T;
  const cublasLtMatrixLayoutOpaque_t la = *a_desc, lb = *b_desc, lc = *c_desc, ld = *d_desc;
  olmo2::simt::enqueue(stream, [=] {
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) {
        double acc = 0.0;  // exact products, one rounding: the reference, not an algorithm
        for (uint64_t p = 0; p < k; ++p)
          acc += static_cast<double>(ta ? load(a, la, p, i) : load(a, la, i, p)) *
                 static_cast<double>(tb ? load(b, lb, j, p) : load(b, lb, p, j));
        float out = static_cast<float>(static_cast<double>(al) * acc);
        // beta = 0: C is not read (cuBLASLt's rule), so NaN there does not propagate.
        if (be != 0.0f) out = static_cast<float>(static_cast<double>(out) + static_cast<double>(be) * load(c, lc, i, j));
        store(d, ld, i, j, out);
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
