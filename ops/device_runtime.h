// The public face of the device runtime for the layers above ops/ (docs/architecture.md
// §2, the device seam): which GPUs there are, which one this process uses, and the
// stream work on a device is ordered on by default. No CUDA types: a Stream carries the
// cudaStream_t as an opaque handle. Every build has these; without CUDA they report no
// GPU.
#pragma once

#include <string>

#include "ops/device.h"

namespace olmo2::ops {

/// The stream ops and collectives on `device` are ordered on by default: on the CPU the
/// implicit one (Stream{}); on CUDA the process's compute stream (created on first use
/// on the current GPU, docs/architecture.md §2). Throws Error for Device::CUDA in a
/// build without CUDA, or when CUDA fails to create the stream.
Stream default_stream(Device device);

/// The number of GPUs this process sees: 0, not an error, in a build without CUDA, with
/// no driver or no device, with the reason in `*why` when given.
int gpu_count(std::string* why = nullptr);

/// The CUDA device ordinal this process uses (cudaGetDevice). Throws Error in a build
/// without CUDA or when CUDA fails.
int current_gpu();

/// Makes GPU `gpu` this process's device (ops::cuda::use_device) — call it before any
/// other CUDA work — and ends every later CUDA error message with `error_label` (e.g.
/// "rank 3 (tp 1, pp 0, dp 1) on GPU 1"). Throws InputError when `gpu` is not in [0,
/// gpu_count()), Error in a build without CUDA.
void use_gpu(int gpu, const std::string& error_label);

/// What identifies GPU `gpu` on its host whatever CUDA_VISIBLE_DEVICES does to its
/// ordinal: its PCI bus id ("0000:3B:00.0", cudaDeviceGetPCIBusId); "emulated" on the
/// emulated device. Two processes of one host use the same GPU exactly when these are
/// equal. Throws Error on a CUDA failure or without CUDA.
std::string gpu_identity(int gpu);

/// "NVIDIA H200, 139 GiB": GPU `gpu`'s name and memory (cudaGetDeviceProperties; GiB
/// rounded, one decimal below 10). Throws Error on a CUDA failure or without CUDA.
std::string gpu_description(int gpu);

/// Gives the GPU caching allocator's wholly free segments back to the driver (after the
/// device is idle), before a library allocates device memory on its own (NCCL's set-up
/// and first collectives). Nothing without CUDA, on the emulated device, or before this
/// process used a GPU.
void release_cached_gpu_memory();

/// The most bytes the GPU caching allocator keeps cached (ops::cuda::set_cache_limit;
/// default a quarter of the GPU's memory). Nothing without CUDA or on the emulated device.
void set_gpu_cache_limit(size_t bytes);

/// Device memory of the caching allocator, in bytes (docs/architecture.md §2, "Device
/// memory"): handed out, and held but free. Zeros without CUDA or before any allocation.
struct GpuMemory {
  size_t in_use_bytes = 0, cached_bytes = 0;
};
GpuMemory gpu_memory();

/// Records that asynchronous GPU work of this process failed (a collective's watchdog
/// timed out and aborted its communicator, docs/architecture.md §6): from now on every
/// wait for the compute stream (ops::cuda::synchronize, a device → host copy) throws
/// Error with `what` after the wait, so no result computed after the failure is used.
/// The first record wins. Nothing without CUDA.
void record_gpu_failure(const std::string& what);

}  // namespace olmo2::ops
