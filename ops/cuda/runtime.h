// The CUDA device runtime of one process (docs/architecture.md §2): which GPU it uses,
// the compute stream every op and collective is enqueued on, the cuBLASLt handle, and
// device memory from the caching allocator. Only in builds with CUDA (OLMO2_HAVE_CUDA).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace olmo2::ops::cuda {

/// The number of CUDA devices this process sees; 0, not an error, when there is no
/// driver or no device, with the reason in `*why` when given (e.g. "cudaGetDeviceCount:
/// cudaErrorNoDevice: no CUDA-capable device is detected").
int device_count(std::string* why = nullptr);

/// Makes `device` this process's GPU (cudaSetDevice) before any other CUDA work. Throws
/// InputError when `device` is not in [0, device_count()).
void use_device(int device);

/// The GPU this process uses (cudaGetDevice).
int current_device();

/// The compute stream: every op's kernels, every cuBLASLt product and every NCCL
/// collective of this process are enqueued on it, in program order. Created on first
/// use on the current device (cudaStreamNonBlocking). Throws Error on a CUDA failure.
cudaStream_t compute_stream();

/// Blocks until all work on the compute stream is done (cudaStreamSynchronize),
/// surfacing any asynchronous kernel error as Error naming the call.
void synchronize();

/// The process's cuBLASLt handle, created on first use. Throws Error on failure.
cublasLtHandle_t cublaslt_handle();

/// The cuBLASLt workspace of the compute stream: `*bytes` is its size (32 MiB).
void* cublaslt_workspace(size_t* bytes);

/// `bytes` of device memory on the current device, 256-byte aligned, from the caching
/// allocator: freed blocks are kept and reused for requests of the same rounded size,
/// so a steady step loop makes no cudaMalloc. Throws Error (naming the size, the bytes
/// in use and cached) when the device is out of memory even after releasing the cache.
void* device_malloc(size_t bytes);

/// Returns memory from device_malloc to the cache. Work already enqueued on the compute
/// stream that uses it stays valid: the block is only reused by later allocations,
/// whose work is ordered after it on the same stream. Null is ignored.
void device_free(void* p);

/// What the caching allocator holds, in bytes, and how many cudaMalloc calls it made.
struct AllocatorStats {
  size_t in_use_bytes = 0;
  size_t cached_bytes = 0;
  size_t cuda_malloc_calls = 0;
};
AllocatorStats allocator_stats();

/// Frees every cached (unused) block with cudaFree, after synchronizing the device.
void release_cached_memory();

}  // namespace olmo2::ops::cuda
