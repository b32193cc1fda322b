// The device runtime (ops/cuda/runtime.h): device choice, compute stream, cuBLASLt
// handle, and the caching allocator (its bookkeeping: ops/block_pool.h).
#include "ops/cuda/runtime.h"

#include <atomic>
#include <mutex>
#include <string>

#include "core/error.h"
#include "ops/block_pool.h"
#include "ops/cuda/check.h"

namespace olmo2::ops::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

std::atomic<size_t> g_cache_limit{0};  // 0: not set
std::atomic<int> g_device{-1};         // use_device's GPU; -1: not chosen
thread_local int t_bound_device = -1;  // the GPU this thread was bound to by bind_thread

std::mutex& failure_mutex() {
  static std::mutex mu;
  return mu;
}
std::string& async_failure() {
  static std::string* text = new std::string;
  return *text;
}
std::atomic<bool> g_failed{false};

size_t default_cache_limit() {
  if (size_t set = g_cache_limit.load()) return set;
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    cudaGetLastError();
    return size_t{4} << 30;
  }
  return total / 4;
}

struct DeviceState {
  // Set once, under state_mutex(); read without the lock on every op (an acquire load),
  // since every kernel launch and every Buffer asks for the stream.
  std::atomic<cudaStream_t> stream{nullptr};
  std::atomic<cublasLtHandle_t> lt{nullptr};
  std::atomic<void*> workspace{nullptr};
};

DeviceState& state() {
  static DeviceState s;
  return s;
}

/// Guards the lazy creation of the stream, the handle and the workspace: the first ops
/// may come from two threads at once (the server's HTTP threads and its engine).
std::mutex& state_mutex() {
  static std::mutex mu;
  return mu;
}

/// The caching allocator over cudaMalloc/cudaFree (ops/block_pool.h). Its cap on cached
/// bytes is set_cache_limit()'s, else a quarter of the GPU's memory (read when the first
/// block is allocated). Segments are given back after the device is idle, so no queued
/// kernel still uses them.
BlockPool& pool() {
  static BlockPool* p = new BlockPool(  // never destroyed: device memory is freed by the driver at exit
      [](size_t bytes) -> void* {
        void* ptr = nullptr;
        const cudaError_t err = cudaMalloc(&ptr, bytes);
        if (err == cudaSuccess) return ptr;
        cudaGetLastError();  // clear it: the pool retries, then throws its own error
        if (err != cudaErrorMemoryAllocation) {
          OLMO2_THROW(Error, "cudaMalloc of ", bytes, " bytes failed: ", cudaGetErrorName(err), ": ",
                      cudaGetErrorString(err));
        }
        return nullptr;
      },
      [](void* ptr) { OLMO2_CUDA_CHECK(cudaFree(ptr)); }, [] { OLMO2_CUDA_CHECK(cudaDeviceSynchronize()); },
      default_cache_limit());
  return *p;
}

}  // namespace

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    cudaGetLastError();  // clear the error so that later checks do not report it again
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount: 0 devices";
  return n;
}

void use_device(int device) {
  std::string why;
  const int n = device_count(&why);
  if (device < 0 || device >= n) {
    OLMO2_THROW(InputError, "GPU ", device, " does not exist: this process sees ", n, " CUDA device(s)",
                n == 0 ? " (" + why + ")" : std::string());
  }
  OLMO2_CUDA_CHECK(cudaSetDevice(device));
  g_device.store(device);
  t_bound_device = device;
}

void bind_thread() {
  const int d = g_device.load(std::memory_order_relaxed);
  if (d < 0 || t_bound_device == d) return;
  OLMO2_CUDA_CHECK(cudaSetDevice(d));
  t_bound_device = d;
}

void record_async_failure(const std::string& what) {
  std::lock_guard<std::mutex> lock(failure_mutex());
  if (g_failed.load()) return;
  async_failure() = what;
  g_failed.store(true);
}

void clear_async_failure() {
  std::lock_guard<std::mutex> lock(failure_mutex());
  async_failure().clear();
  g_failed.store(false);
}

void throw_if_async_failure() {
  if (!g_failed.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(failure_mutex());
  OLMO2_THROW(Error, async_failure(), " (asynchronous GPU failure: results computed after it are not used)");
}

int current_device() {
  int d = 0;
  OLMO2_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

cudaStream_t compute_stream() {
  bind_thread();
  DeviceState& s = state();
  if (cudaStream_t made = s.stream.load(std::memory_order_acquire)) return made;
  std::lock_guard<std::mutex> lock(state_mutex());
  if (!s.stream.load(std::memory_order_relaxed)) {
    cudaStream_t made = nullptr;
    OLMO2_CUDA_CHECK(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
    s.stream.store(made, std::memory_order_release);
  }
  return s.stream.load(std::memory_order_relaxed);
}

void synchronize() {
  OLMO2_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  throw_if_async_failure();
}

cublasLtHandle_t cublaslt_handle() {
  bind_thread();
  DeviceState& s = state();
  if (cublasLtHandle_t made = s.lt.load(std::memory_order_acquire)) return made;
  std::lock_guard<std::mutex> lock(state_mutex());
  if (!s.lt.load(std::memory_order_relaxed)) {
    cublasLtHandle_t made = nullptr;
    OLMO2_CUBLAS_CHECK(cublasLtCreate(&made));
    s.lt.store(made, std::memory_order_release);
  }
  return s.lt.load(std::memory_order_relaxed);
}

void* cublaslt_workspace(size_t* bytes) {
  DeviceState& s = state();
  *bytes = kWorkspaceBytes;
  if (void* made = s.workspace.load(std::memory_order_acquire)) return made;
  std::lock_guard<std::mutex> lock(state_mutex());
  if (!s.workspace.load(std::memory_order_relaxed)) s.workspace.store(device_malloc(kWorkspaceBytes), std::memory_order_release);
  return s.workspace.load(std::memory_order_relaxed);
}

void* device_malloc(size_t bytes) {
  bind_thread();
  try {
    return pool().allocate(bytes);
  } catch (const Error& e) {
    const std::string label = error_label();
    if (label.empty()) throw;
    OLMO2_THROW(Error, e.what(), " [", label, "]");
  }
}

void device_free(void* p) {
  bind_thread();
  pool().free(p);
}

AllocatorStats allocator_stats() {
  const BlockPoolStats s = pool().stats();
  return AllocatorStats{s.in_use_bytes, s.cached_bytes, s.backing_allocs};
}

void release_cached_memory() { pool().release_cached(); }

void set_cache_limit(size_t bytes) {
  g_cache_limit.store(bytes);
  pool().set_cache_limit(bytes);
}

}  // namespace olmo2::ops::cuda
