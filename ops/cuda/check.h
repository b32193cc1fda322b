// Checked CUDA, cuBLAS and NCCL calls for the CUDA backend (docs/architecture.md §2, the
// device runtime). Every call into those libraries goes through one of these macros; a
// failure throws olmo2::Error naming the call, the library's error name and text,
// file:line, and the process label (the rank, set by the launcher).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

namespace olmo2::ops::cuda {

/// Sets the label that every CUDA error message ends with, e.g. "rank 3 (tp 1, pp 0,
/// dp 0) on GPU 1". The launcher sets it once the rank layout is known; until then it
/// is empty. Not thread-safe against concurrent errors; set it at start.
void set_error_label(std::string label);

/// The label set by set_error_label ("" until then).
const std::string& error_label();

/// Throws Error "CALL failed: NAME: TEXT at FILE:LINE [LABEL]" when `err` is not
/// cudaSuccess. Returns normally otherwise.
void check_cuda(cudaError_t err, const char* call, const char* file, int line);

/// As check_cuda for cuBLAS / cuBLASLt statuses (cublasLtGetStatusName/String).
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);

/// After a kernel launch: throws Error naming `kernel` when cudaGetLastError reports a
/// launch failure (bad configuration, no device, missing image for this GPU's arch).
void check_launch(const char* kernel, const char* file, int line);

}  // namespace olmo2::ops::cuda

#define OLMO2_CUDA_CHECK(call) ::olmo2::ops::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define OLMO2_CUBLAS_CHECK(call) ::olmo2::ops::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define OLMO2_CUDA_CHECK_LAUNCH(kernel) ::olmo2::ops::cuda::check_launch((kernel), __FILE__, __LINE__)
