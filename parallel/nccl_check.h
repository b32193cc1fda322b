// Checked NCCL and CUDA calls of the device communicators (docs/architecture.md §6): a
// failure throws olmo2::Error naming the call, NCCL's (or CUDA's) error name and text,
// NCCL's last-error detail, file:line and who made the call (world rank, group and
// group rank, and the operation). Only in builds with CUDA (OLMO2_HAVE_CUDA); ops/ does
// not know NCCL, so these live next to the communicator.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace olmo2::parallel {

/// Throws Error "CALL failed: ncclInvalidUsage (TEXT); NCCL: LAST at FILE:LINE [WHERE]"
/// unless `result` is ncclSuccess, or ncclInProgress when `in_progress_ok` (a call on a
/// non-blocking communicator that NCCL finishes in the background). `comm` (may be
/// null) is asked for ncclGetLastError; `where` is e.g. "rank 3 (tp rank 1 of 2),
/// all_reduce_sum #7 on group tp".
void check_nccl(ncclResult_t result, const char* call, ncclComm_t comm, const std::string& where,
                const char* file, int line, bool in_progress_ok = false);

/// Throws Error "CALL failed: NAME: TEXT at FILE:LINE [WHERE]" unless `err` is
/// cudaSuccess; clears CUDA's sticky last error first.
void check_cuda_call(cudaError_t err, const char* call, const std::string& where, const char* file,
                     int line);

/// "ncclInvalidUsage", ... for messages.
const char* nccl_result_name(ncclResult_t result);

}  // namespace olmo2::parallel

/// Checks an NCCL call that must return ncclSuccess.
#define OLMO2_NCCL_CHECK(call, comm, where) \
  ::olmo2::parallel::check_nccl((call), #call, (comm), (where), __FILE__, __LINE__)
/// Checks an NCCL call on a non-blocking communicator: ncclInProgress is accepted (the
/// caller then polls ncclCommGetAsyncError until it settles).
#define OLMO2_NCCL_CHECK_ASYNC(call, comm, where) \
  ::olmo2::parallel::check_nccl((call), #call, (comm), (where), __FILE__, __LINE__, true)
/// Checks a CUDA runtime call made by a device communicator.
#define OLMO2_COMM_CUDA_CHECK(call, where) \
  ::olmo2::parallel::check_cuda_call((call), #call, (where), __FILE__, __LINE__)
