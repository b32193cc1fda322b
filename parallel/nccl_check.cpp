// Checked NCCL and CUDA calls of the device communicators (parallel/nccl_check.h).
#include "parallel/nccl_check.h"

#include "core/error.h"

namespace olmo2::parallel {

const char* nccl_result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult?";
  }
}

void check_nccl(ncclResult_t result, const char* call, ncclComm_t comm, const std::string& where,
                const char* file, int line, bool in_progress_ok) {
  if (result == ncclSuccess || (in_progress_ok && result == ncclInProgress)) return;
  const char* last = ncclGetLastError(comm);
  const std::string detail = last && *last ? std::string("; NCCL: ") + last : std::string();
  throw Error(detail::concat(call, " failed: ", nccl_result_name(result), " (",
                             ncclGetErrorString(result), ")", detail, " at ", file, ":", line,
                             " [", where, "]"),
              file, line);
}

void check_cuda_call(cudaError_t err, const char* call, const std::string& where, const char* file,
                     int line) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that the next check does not report it
  throw Error(detail::concat(call, " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err),
                             " at ", file, ":", line, " [", where, "]"),
              file, line);
}

}  // namespace olmo2::parallel
