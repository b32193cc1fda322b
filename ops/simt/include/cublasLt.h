// The OLMO2_CUDA_ON_CPU build's cublasLt.h: the cuBLASLt calls the CUDA backend makes,
// answered by a reference product on the CPU (ops/simt/cublaslt_stand_in.cpp;
// docs/architecture.md §10). Types, enums and numeric values as the cuBLASLt
// documentation gives them; only what the backend uses.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_runtime.h"

enum cudaDataType_t : int { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
using cudaDataType = cudaDataType_t;

enum cublasStatus_t : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

enum cublasOperation_t : int { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasComputeType_t : int { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };

enum cublasLtOrder_t : int { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1 };
enum cublasLtMatrixLayoutAttribute_t : int {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,
  CUBLASLT_MATRIX_LAYOUT_LD = 4,
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
};
enum cublasLtMatmulDescAttributes_t : int {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
};
enum cublasLtMatmulPreferenceAttributes_t : int {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};
enum cublasLtMatmulAlgoConfigAttributes_t : int {
  CUBLASLT_ALGO_CONFIG_ID = 0,
  CUBLASLT_ALGO_CONFIG_TILE_ID = 1,
  CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 2,
  CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME = 3,
};
enum cublasLtReductionScheme_t : int { CUBLASLT_REDUCTION_SCHEME_NONE = 0, CUBLASLT_REDUCTION_SCHEME_INPLACE = 1 };

struct cublasLtContext;
struct cublasLtMatmulDescOpaque_t;
struct cublasLtMatrixLayoutOpaque_t;
struct cublasLtMatmulPreferenceOpaque_t;
using cublasLtHandle_t = cublasLtContext*;
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;

/// An algorithm: opaque to callers. The stand-in keeps its id, split-K count and
/// reduction scheme in data[0..2].
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
const char* cublasLtGetStatusName(cublasStatus_t status);
const char* cublasLtGetStatusString(cublasStatus_t status);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size);

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned);
cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                       cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                       const cublasLtMatmulAlgo_t* algo, cublasLtMatmulHeuristicResult_t* result);
cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, const void* buf,
                                                    size_t size);

/// D = alpha·op(A)·op(B) + beta·C on `stream`, as cuBLASLt defines it (column-major
/// unless a layout says row order; op per TRANSA / TRANSB).
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t a_desc, const void* b, cublasLtMatrixLayout_t b_desc,
                              const void* beta, const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);
