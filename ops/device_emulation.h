// The emulated device: OLMO2_DEVICE_EMULATION=1 makes Device::CUDA host memory computed
// on by the CPU kernels, so that every `--device cuda` code path above ops/ (the model,
// the KV cache, the trainer, the server, the device communicators) runs on a machine
// without a GPU, in CI (docs/architecture.md §2 the device seam, §10 tests). A test
// facility: the emulated views still refuse host access (data_as, f32, i32 throw as for
// a real device), so host code that touches device memory fails here as it would on a
// GPU; and since the CPU kernels compute both, a `--device cuda` run equals the
// `--device cpu` run bit for bit, so any difference is an integration bug.
#pragma once

#include <utility>

#include "ops/tensor.h"

namespace olmo2::ops {

/// Whether OLMO2_DEVICE_EMULATION is set to "1" in the environment (read once, on the
/// first call). Under emulation: Buffer allocates Device::CUDA memory on the host
/// (aligned_alloc, zero-filled); ops on Device::CUDA views run the CPU implementation;
/// gpu_count() is 1; use_gpu does nothing; default_stream(Device::CUDA) is
/// Stream{Device::CUDA, nullptr}; make_device_communicator carries device views through
/// the group's MPI communicator. No CUDA runtime function is called, in any build.
bool device_emulated();

/// `v` as a CPU view: same pointer, dtype, shape and strides. For the emulation's
/// backend only (ops/dispatch.cpp, parallel/emulated_device_communicator.*): a
/// Device::CUDA view is re-flagged only under emulation (Error otherwise — its memory is
/// not the host's); a CPU view is returned as is.
TensorView emulated_host_view(const TensorView& v);

namespace detail {
/// Each TensorView argument as emulated_host_view of itself, every other one unchanged.
inline TensorView emulated_arg(const TensorView& v) { return emulated_host_view(v); }
template <typename T>
const T& emulated_arg(const T& x) {
  return x;
}
}  // namespace detail

/// Calls `f` with `args`, each TensorView re-flagged as a CPU view (emulated_host_view),
/// the others unchanged: how ops/dispatch.cpp hands emulated-device views to ops::cpu::.
template <typename F, typename... Args>
decltype(auto) call_on_host(F&& f, const Args&... args) {
  return std::forward<F>(f)(detail::emulated_arg(args)...);
}

}  // namespace olmo2::ops
