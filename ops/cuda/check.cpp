#include "ops/cuda/check.h"

#include "core/error.h"

namespace olmo2::ops::cuda {
namespace {
std::string& label_storage() {
  static std::string label;
  return label;
}
/// " at FILE:LINE [LABEL]": where the failing call is, and which process made it.
std::string suffix(const char* file, int line) {
  std::string s = detail::concat(" at ", file, ":", line);
  if (!label_storage().empty()) s += " [" + label_storage() + "]";
  return s;
}
}  // namespace

void set_error_label(std::string label) { label_storage() = std::move(label); }
const std::string& error_label() { return label_storage(); }

void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw Error(detail::concat(call, " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err), suffix(file, line)), file,
              line);
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(detail::concat(call, " failed: ", cublasLtGetStatusName(status), ": ", cublasLtGetStatusString(status),
                             suffix(file, line)),
              file, line);
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return;
  throw Error(detail::concat("launch of ", kernel, " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err),
                             suffix(file, line)),
              file, line);
}

}  // namespace olmo2::ops::cuda
