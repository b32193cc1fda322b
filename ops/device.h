// Where tensor memory lives and where work runs: the device of a view, and the stream an
// op or a collective is ordered on.
#pragma once

#include <cstdint>

namespace olmo2 {

enum class Device : uint8_t { CPU, CUDA };

/// "cpu" or "cuda", for messages.
constexpr const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

/// The queue work is ordered on. On the CPU there is one, implicit: every call completes
/// before it returns (handle null). On CUDA, handle is a cudaStream_t; ops and
/// collectives given it are enqueued on it and return before the work is done.
struct Stream {
  Device device = Device::CPU;
  void* handle = nullptr;
};

/// The stream ops on `device` are enqueued on: the implicit one on the CPU, the compute
/// stream on CUDA (ops/cuda/runtime.h; created on first use on the current GPU) — what
/// collectives over that device's views are ordered on when the caller names no stream.
/// Throws Error for CUDA in a build without CUDA.
Stream default_stream(Device device);

}  // namespace olmo2
