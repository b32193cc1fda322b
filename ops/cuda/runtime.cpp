// The device runtime (ops/cuda/runtime.h): device choice, compute stream, cuBLASLt
// handle, and the caching allocator.
#include "ops/cuda/runtime.h"

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "ops/cuda/check.h"

namespace olmo2::ops::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

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

/// Requests are rounded up to a multiple of 512 bytes (small) or 2 MiB (large), so a
/// freed block serves every later request of the same rounded size.
size_t round_size(size_t bytes) {
  const size_t q = bytes < (size_t{1} << 20) ? 512 : (size_t{2} << 20);
  return (bytes + q - 1) / q * q;
}

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;       // rounded size -> block
  std::unordered_map<void*, size_t> live;         // block -> rounded size
  AllocatorStats stats;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: device memory is freed by the driver at exit
  return *c;
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
}

int current_device() {
  int d = 0;
  OLMO2_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

cudaStream_t compute_stream() {
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

void synchronize() { OLMO2_CUDA_CHECK(cudaStreamSynchronize(compute_stream())); }

cublasLtHandle_t cublaslt_handle() {
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
  if (bytes == 0) return nullptr;
  const size_t size = round_size(bytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.free_blocks.find(size);
  if (it != c.free_blocks.end()) {
    void* p = it->second;
    c.free_blocks.erase(it);
    c.live.emplace(p, size);
    c.stats.cached_bytes -= size;
    c.stats.in_use_bytes += size;
    return p;
  }
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation && !c.free_blocks.empty()) {
    cudaGetLastError();
    OLMO2_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& [sz, q] : c.free_blocks) OLMO2_CUDA_CHECK(cudaFree(q));
    c.free_blocks.clear();
    c.stats.cached_bytes = 0;
    err = cudaMalloc(&p, size);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    OLMO2_THROW(Error, "out of GPU memory: cudaMalloc of ", size, " bytes failed (", cudaGetErrorString(err), "); ",
                c.stats.in_use_bytes, " bytes in use, ", c.stats.cached_bytes, " cached",
                error_label().empty() ? "" : " [" + error_label() + "]");
  }
  ++c.stats.cuda_malloc_calls;
  c.live.emplace(p, size);
  c.stats.in_use_bytes += size;
  return p;
}

void device_free(void* p) {
  if (!p) return;
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.live.find(p);
  OLMO2_CHECK(it != c.live.end(), "device_free of a pointer the caching allocator did not hand out");
  c.free_blocks.emplace(it->second, p);
  c.stats.in_use_bytes -= it->second;
  c.stats.cached_bytes += it->second;
  c.live.erase(it);
}

AllocatorStats allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void release_cached_memory() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.free_blocks.empty()) return;
  OLMO2_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& [sz, q] : c.free_blocks) OLMO2_CUDA_CHECK(cudaFree(q));
  c.free_blocks.clear();
  c.stats.cached_bytes = 0;
}

}  // namespace olmo2::ops::cuda
