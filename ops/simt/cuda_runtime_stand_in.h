// A stand-in for the CUDA runtime API calls the CUDA backend makes, for the
// OLMO2_CUDA_ON_CPU build (docs/architecture.md §10). Written from the CUDA Runtime API
// reference, not from our code: streams run their work in order, but only at a
// synchronisation point (stream, event or device synchronise, an event query, a copy to
// pageable host memory), so a host read of a pinned copy destination before the stream
// is synchronised reads stale data (a copy to pageable memory completes before the call
// returns, as CUDA's); events; device memory from an allocator that fills it
// with NaN bytes (0xff) and refuses a copy or free outside an allocation; the sticky
// last error of a bad launch. Numeric values of the enums are CUDA's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute : int { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

inline constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
inline constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

/// The fields of cudaDeviceProp the backend reads (names and meanings as CUDA's).
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int major, minor;
  int multiProcessorCount;
  int maxThreadsPerBlock;
  int warpSize;
};

enum cudaMemoryType : int {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
/// What cudaPointerGetAttributes reports of a pointer (CUDA's fields).
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t err);
const char* cudaGetErrorString(cudaError_t err);

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
/// Milliseconds between two completed events, by the host's steady clock when each ran.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemset2DAsync(void* dst, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t stream = nullptr);

using cudaHostFn_t = void (*)(void* user_data);
/// Queues fn(user_data) on the stream, in order with its other work.
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data);

/// Records the largest dynamic shared memory `kernel` may launch with.
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value);
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

namespace olmo2::simt {

/// Enqueues `work` on `stream` (nullptr: the default stream); it runs, in order with the
/// stream's other work, at the stream's next synchronisation point.
void enqueue(cudaStream_t stream, std::function<void()> work);

/// As enqueue, for work that calls MPI (the NCCL stand-in's completions): under
/// MPI_THREAD_FUNNELED only the thread set_mpi_thread() named runs it; a drain on another
/// thread stops before it (a query says not ready, a synchronise waits for that thread).
void enqueue_on_mpi_thread(cudaStream_t stream, std::function<void()> work);
/// Names the calling thread as the one that may call MPI.
void set_mpi_thread();
/// Runs (or, off the MPI thread, waits for) everything queued on `stream` so far.
cudaError_t synchronize_stream(cudaStream_t stream);

/// The dynamic shared memory limit cudaFuncSetAttribute gave `kernel` (48 KiB if none).
size_t dynamic_shared_limit(const void* kernel);

/// Sets the sticky last error (what cudaGetLastError returns and clears).
void set_last_error(cudaError_t err);

/// True when [p, p + bytes) lies inside one live device allocation.
bool is_device_range(const void* p, size_t bytes);

}  // namespace olmo2::simt
