// Kernel launches on the SIMT executor, for the OLMO2_CUDA_ON_CPU build: what
// OLMO2_LAUNCH (ops/cuda/launch.cuh) expands to there (docs/architecture.md §10).
#pragma once

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ops/simt/cuda_runtime_stand_in.h"
#include "ops/simt/executor.h"

namespace olmo2::simt {

/// One launch of `kernel` (a __global__ function compiled as C++) with a grid, block,
/// dynamic shared memory in bytes and stream, as `kernel<<<grid, block, smem, stream>>>`.
/// Calling it with the kernel's arguments checks the configuration (a bad one sets
/// cudaErrorInvalidConfiguration for cudaGetLastError, as on the GPU, and queues
/// nothing), copies the arguments, and queues the grid on the stream.
template <typename... P>
class Launch {
 public:
  Launch(Dim3 grid, Dim3 block, size_t smem, cudaStream_t stream, const char* name, void (*kernel)(P...))
      : stream_(stream), name_(name), kernel_(kernel) {
    config_.grid = grid;
    config_.block = block;
    config_.dynamic_shared = smem;
    config_.dynamic_shared_limit = dynamic_shared_limit(reinterpret_cast<const void*>(kernel));
  }

  template <typename... A>
  void operator()(A&&... args) const {
    try {
      check_launch(config_, name_);
    } catch (const ExecutionError&) {
      set_last_error(cudaErrorInvalidConfiguration);
      return;
    }
    auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
    enqueue(stream_, [config = config_, name = name_, kernel = kernel_, params] {
      run_grid(config, name, [&] { std::apply(kernel, *params); });
    });
  }

 private:
  LaunchConfig config_;
  cudaStream_t stream_;
  const char* name_;
  void (*kernel_)(P...);
};

}  // namespace olmo2::simt
