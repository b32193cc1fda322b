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
/// InputError when `device` is not in [0, device_count()). The current device is per
/// thread in CUDA while the stream, the handles and the allocator's cache are per
/// process: every entry point below binds the calling thread to this device first
/// (bind_thread), so an HTTP thread or a watchdog issues its work on the rank's GPU,
/// not on GPU 0.
void use_device(int device);

/// The GPU this process uses (cudaGetDevice).
int current_device();
/// Binds the calling thread to the process's GPU (use_device's) unless it already is:
/// one thread-local comparison when bound. Nothing before use_device.
void bind_thread();
/// See ops::record_gpu_failure: later waits for the compute stream throw Error(what).
void record_async_failure(const std::string& what);

/// The compute stream: every op's kernels, every cuBLASLt product and every NCCL
/// collective of this process are enqueued on it, in program order. Created on first
/// use on the current device (cudaStreamNonBlocking). Throws Error on a CUDA failure.
cudaStream_t compute_stream();

/// Blocks until all work on the compute stream is done (cudaStreamSynchronize),
/// surfacing any asynchronous kernel error as Error naming the call.
void synchronize();
/// Throws Error with the recorded asynchronous failure, if any (after a stream wait).
void throw_if_async_failure();
/// Forgets a recorded asynchronous failure (tests; a caller that rebuilt what failed).
void clear_async_failure();

/// The process's cuBLASLt handle, created on first use. Throws Error on failure.
cublasLtHandle_t cublaslt_handle();

/// The cuBLASLt workspace of the compute stream: `*bytes` is its size (32 MiB).
void* cublaslt_workspace(size_t* bytes);

/// `bytes` of device memory on the current device, 256-byte aligned, from the caching
/// allocator (ops/block_pool.h): best fit among cached blocks, split and merged within
/// their segments, so a steady step loop makes no cudaMalloc. Throws Error (naming the
/// size, the bytes in use and cached) when the device is out of memory even after every
/// wholly free segment was given back.
void* device_malloc(size_t bytes);

/// Returns memory from device_malloc to the cache. Work already enqueued on the compute
/// stream that uses it stays valid: the block is only reused by later allocations,
/// whose work is ordered after it on the same stream. Null is ignored.
void device_free(void* p);

/// What the caching allocator holds, in bytes, and how many cudaMalloc calls it made
/// (segments; a request served from the cache makes none).
struct AllocatorStats {
  size_t in_use_bytes = 0;
  size_t cached_bytes = 0;
  size_t cuda_malloc_calls = 0;
};
AllocatorStats allocator_stats();

/// Gives every wholly free cached segment back with cudaFree, after synchronizing the
/// device: before a library allocates on its own (NCCL's communicator set-up and its
/// first collectives), so that its cudaMalloc does not fail on memory we only cache.
void release_cached_memory();
/// The most bytes the allocator keeps cached: above it, wholly free segments go back to
/// the driver at each free (default: a quarter of the GPU's memory; OLMO2_GPU_CACHE_LIMIT).
void set_cache_limit(size_t bytes);

}  // namespace olmo2::ops::cuda
