// The CUDA runtime stand-in (ops/simt/cuda_runtime_stand_in.h): streams as ordered queues
// drained at synchronisation points, events, checked device allocations, and the sticky
// error a failed kernel leaves (docs/architecture.md §10).
#include "ops/simt/cuda_runtime_stand_in.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unistd.h>
#include <vector>

#include "ops/simt/executor.h"

struct CUstream_st {
  struct Work {
    std::function<void()> run;
    bool mpi_thread_only;  // completes an MPI request: only the thread that may call MPI runs it
  };
  std::mutex mu;  // held while the stream's work runs: one drain at a time, in order
  std::mutex queue_mu;
  std::deque<Work> queue;
};

struct CUevent_st {
  std::atomic<bool> done{true};  // an event never recorded counts as complete
  cudaStream_t stream = nullptr;
  std::chrono::steady_clock::time_point at{};  // when the stream reached it
};

namespace olmo2::simt {
namespace {

constexpr size_t kDeviceBytes = size_t{80} << 30;  // what cudaMemGetInfo reports as total
constexpr int kDevices = 1;

struct State {
  std::mutex mu;
  std::map<uintptr_t, size_t> device;  // live cudaMalloc allocations: begin → bytes
  std::map<uintptr_t, size_t> pinned;  // live cudaMallocHost allocations
  size_t device_in_use = 0;
  std::unordered_map<const void*, size_t> shared_limits;
  std::vector<std::unique_ptr<CUstream_st>> streams;
  CUstream_st default_stream;
  std::string launch_failure;  // the executor's message once a kernel failed (sticky)
};
State& state() {
  static State* s = new State;  // never destroyed: the backend may synchronise at exit
  return *s;
}
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

cudaError_t fail(cudaError_t err) {
  t_last_error = err;
  return err;
}

CUstream_st* resolve(cudaStream_t s) { return s ? s : &state().default_stream; }

bool inside(const std::map<uintptr_t, size_t>& m, const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second && a + bytes >= a;
}

std::atomic<std::thread::id> g_mpi_thread{};  // the thread that may call MPI (funneled)

bool on_mpi_thread() { return g_mpi_thread.load() == std::thread::id() || g_mpi_thread.load() == std::this_thread::get_id(); }

/// Runs the work queued on `s`, in order; a kernel that broke the execution model leaves
/// the sticky cudaErrorIllegalAddress-like failure, returned from here on. `wait`: block
/// for a drain running on another thread (a query does not). Off the MPI thread, stops
/// before work only that thread may run and sets *partial.
cudaError_t drain(CUstream_st* s, bool wait = true, bool* partial = nullptr) {
  std::unique_lock run(s->mu, std::defer_lock);
  if (wait) {
    run.lock();
  } else if (!run.try_lock()) {
    if (partial) *partial = true;
    return cudaSuccess;
  }
  for (;;) {
    std::function<void()> work;
    {
      std::lock_guard lock(s->queue_mu);
      if (s->queue.empty()) break;
      if (s->queue.front().mpi_thread_only && !on_mpi_thread()) {
        if (partial) *partial = true;
        break;
      }
      work = std::move(s->queue.front().run);
      s->queue.pop_front();
    }
    {
      std::lock_guard lock(state().mu);
      if (!state().launch_failure.empty()) continue;  // the context is lost: drop the work
    }
    try {
      work();
    } catch (const std::exception& e) {
      std::lock_guard lock(state().mu);
      if (state().launch_failure.empty()) state().launch_failure = e.what();
      std::fprintf(stderr, "SIMT executor: %s\n", e.what());
    }
  }
  std::lock_guard lock(state().mu);
  return state().launch_failure.empty() ? cudaSuccess : fail(cudaErrorIllegalAddress);
}

cudaError_t synchronize_stream_of(CUstream_st* s);

cudaError_t drain_all() {
  std::vector<CUstream_st*> all{&state().default_stream};
  {
    std::lock_guard lock(state().mu);
    for (auto& s : state().streams) all.push_back(s.get());
  }
  cudaError_t err = cudaSuccess;
  for (CUstream_st* s : all)
    if (cudaError_t e = synchronize_stream_of(s); e != cudaSuccess) err = e;
  return err;
}

cudaError_t synchronize_stream_of(CUstream_st* s) {
  for (;;) {
    bool partial = false;
    const cudaError_t e = drain(s, true, &partial);
    if (e != cudaSuccess || !partial) return e;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

void enqueue(cudaStream_t stream, std::function<void()> work) {
  CUstream_st* s = resolve(stream);
  std::lock_guard lock(s->queue_mu);
  s->queue.push_back({std::move(work), false});
}

void enqueue_on_mpi_thread(cudaStream_t stream, std::function<void()> work) {
  CUstream_st* s = resolve(stream);
  std::lock_guard lock(s->queue_mu);
  s->queue.push_back({std::move(work), true});
}

void set_mpi_thread() { g_mpi_thread.store(std::this_thread::get_id()); }

cudaError_t synchronize_stream(cudaStream_t stream) { return synchronize_stream_of(resolve(stream)); }

size_t dynamic_shared_limit(const void* kernel) {
  std::lock_guard lock(state().mu);
  auto it = state().shared_limits.find(kernel);
  return it == state().shared_limits.end() ? kDefaultDynamicSharedLimit : it->second;
}

void set_last_error(cudaError_t err) { t_last_error = err; }

bool is_device_range(const void* p, size_t bytes) {
  std::lock_guard lock(state().mu);
  return inside(state().device, p, bytes);
}

}  // namespace olmo2::simt

using namespace olmo2::simt;

cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return t_last_error; }

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t err) {
  if (err == cudaErrorIllegalAddress) {
    static thread_local std::string text;
    std::lock_guard lock(state().mu);
    text = "a kernel failed on the SIMT executor: " + state().launch_failure;
    return text.c_str();
  }
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNotReady: return "device not ready";
    default: return "error on the SIMT executor's stand-in runtime";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = kDevices;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= kDevices) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= kDevices) return fail(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "SIMT executor on the CPU");
  p->totalGlobalMem = kDeviceBytes;
  p->sharedMemPerBlock = kDefaultDynamicSharedLimit;
  p->sharedMemPerBlockOptin = kMaxDynamicShared;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p->maxThreadsPerBlock = static_cast<int>(kMaxThreadsPerBlock);
  p->warpSize = kWarpSize;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  if (device < 0 || device >= kDevices) return fail(cudaErrorInvalidDevice);
  // One GPU that the processes of a node share, as a one-GPU machine; with
  // OLMO2_SIMT_GPU_PER_PROCESS=1 each process its own (the PCI domain from the process
  // id), so that ranks on one node take NCCL, not the host-staged path.
  const char* own = std::getenv("OLMO2_SIMT_GPU_PER_PROCESS");
  const unsigned domain = own && std::string(own) == "1" ? static_cast<unsigned>(getpid()) & 0xffffu : 0u;
  std::snprintf(bus_id, static_cast<size_t>(len), "%04x:%02x:00.0", domain, device + 1);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return drain_all(); }
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard lock(state().mu);
  *total_bytes = kDeviceBytes;
  *free_bytes = kDeviceBytes - state().device_in_use;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  std::lock_guard lock(state().mu);
  if (state().device_in_use + bytes > kDeviceBytes) return fail(cudaErrorMemoryAllocation);
  void* p = nullptr;
  // Exactly `bytes` long, so AddressSanitizer sees an overrun by one; 256-byte aligned as
  // cudaMalloc's memory; NaN bytes, so a read before any write is noticed.
  if (posix_memalign(&p, 256, bytes) != 0) return fail(cudaErrorMemoryAllocation);
  std::memset(p, 0xff, bytes);
  state().device[reinterpret_cast<uintptr_t>(p)] = bytes;
  state().device_in_use += bytes;
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  if (cudaError_t e = drain_all(); e != cudaSuccess) return e;  // cudaFree synchronises the device
  std::lock_guard lock(state().mu);
  auto it = state().device.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == state().device.end()) return fail(cudaErrorInvalidDevicePointer);
  state().device_in_use -= it->second;
  state().device.erase(it);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  *attr = cudaPointerAttributes{};
  std::lock_guard lock(state().mu);
  if (inside(state().device, ptr, 1)) {
    attr->type = cudaMemoryTypeDevice;
    attr->device = 0;  // the stand-in has one device
    attr->devicePointer = const_cast<void*>(ptr);
  } else if (inside(state().pinned, ptr, 1)) {
    attr->type = cudaMemoryTypeHost;
    attr->hostPointer = attr->devicePointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  *ptr = std::malloc(std::max<size_t>(bytes, 1));
  if (*ptr == nullptr) return fail(cudaErrorMemoryAllocation);
  std::lock_guard lock(state().mu);
  state().pinned[reinterpret_cast<uintptr_t>(*ptr)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard lock(state().mu);
  if (state().pinned.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) return fail(cudaErrorInvalidValue);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  std::lock_guard lock(state().mu);
  state().streams.push_back(std::make_unique<CUstream_st>());
  *stream = state().streams.back().get();
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  const cudaError_t e = synchronize_stream_of(stream);  // work already queued completes, as CUDA's
  std::lock_guard lock(state().mu);
  auto& v = state().streams;
  auto it = std::find_if(v.begin(), v.end(), [&](const auto& s) { return s.get() == stream; });
  if (it == v.end()) return fail(cudaErrorInvalidResourceHandle);
  v.erase(it);
  return e;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return synchronize_stream(stream); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  event->done.store(false);
  event->stream = stream;
  enqueue(stream, [event] {
    event->at = std::chrono::steady_clock::now();
    event->done.store(true);
  });
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event->done.load()) return cudaSuccess;
  // Not done when asked; the device makes progress meanwhile (what this thread may run,
  // without waiting for another thread's drain), so a later query finds it done.
  if (cudaError_t e = drain(resolve(event->stream), false); e != cudaSuccess) return e;
  return fail(cudaErrorNotReady);
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event->done.load()) return cudaSuccess;
  return synchronize_stream(event->stream);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (!start->done.load() || !end->done.load()) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  // The work before the event runs before anything `stream` queues after this call.
  if (!event->done.load() && resolve(event->stream) != resolve(stream)) {
    cudaStream_t other = event->stream;
    enqueue(stream, [other] { (void)cudaStreamSynchronize(other); });
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const bool dst_device = is_device_range(dst, bytes), src_device = is_device_range(src, bytes);
  bool pinned_dst, pinned_src;
  {
    std::lock_guard lock(state().mu);
    pinned_dst = inside(state().pinned, dst, bytes);
    pinned_src = inside(state().pinned, src, bytes);
  }
  const bool want_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice,
             want_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if ((want_dst && !dst_device) || (want_src && !src_device) || (kind == cudaMemcpyHostToDevice && src_device) ||
      (kind == cudaMemcpyDeviceToHost && dst_device))
    return fail(cudaErrorInvalidValue);
  if (kind == cudaMemcpyDeviceToHost && !pinned_dst) {
    // To pageable memory the call returns once the copy is done.
    if (cudaError_t e = synchronize_stream(stream); e != cudaSuccess) return e;
    std::memcpy(dst, src, bytes);
    return cudaSuccess;
  }
  if (kind == cudaMemcpyHostToDevice && !pinned_src) {
    // From pageable memory the source is staged at the call; the device gets it later.
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + bytes);
    enqueue(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
    return cudaSuccess;
  }
  enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr); e != cudaSuccess) return e;
  return drain_all();
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (cudaError_t e = cudaMemsetAsync(dst, value, bytes, nullptr); e != cudaSuccess) return e;
  return drain_all();
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(dst, bytes)) return fail(cudaErrorInvalidValue);
  enqueue(stream, [dst, value, bytes] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemset2DAsync(void* dst, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > pitch || !is_device_range(dst, pitch * (height - 1) + width)) return fail(cudaErrorInvalidValue);
  enqueue(stream, [=] {
    for (size_t r = 0; r < height; ++r) std::memset(static_cast<unsigned char*>(dst) + r * pitch, value, width);
  });
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return fail(cudaErrorInvalidValue);
  enqueue(stream, [fn, user_data] { fn(user_data); });
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > kMaxDynamicShared)
    return fail(cudaErrorInvalidValue);
  std::lock_guard lock(state().mu);
  state().shared_limits[kernel] = static_cast<size_t>(value);
  return cudaSuccess;
}
