// Page-locked host memory and the host → device staging pool (ops/cuda/pinned.h).
#include "ops/cuda/pinned.h"

#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/runtime.h"

namespace olmo2::ops::cuda {

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) OLMO2_CUDA_CHECK(cudaMallocHost(&data_, bytes));
}
PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);  // no throw from a destructor; a failure here only leaks
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr), bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

namespace {

constexpr int kSlots = 16;

struct Slot {
  PinnedBuffer buffer;
  cudaEvent_t done = nullptr;  // recorded after the slot's last transfer; null: never used
  bool taken = false;
  uint64_t last_use = 0;
};

struct Pool {
  std::mutex mu;
  std::vector<Slot> slots;
  uint64_t uses = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: pinned memory is freed by the driver at exit
  return *p;
}

}  // namespace

StagingBuffer::StagingBuffer() {
  Pool& p = pool();
  std::unique_lock<std::mutex> lock(p.mu);
  for (;;) {
    int oldest = -1;
    for (size_t i = 0; i < p.slots.size(); ++i) {
      Slot& s = p.slots[i];
      if (s.taken) continue;
      const cudaError_t q = s.done ? cudaEventQuery(s.done) : cudaSuccess;
      if (q == cudaSuccess) {
        s.taken = true, slot_ = static_cast<int>(i);
        return;
      }
      if (q != cudaErrorNotReady) check_cuda(q, "cudaEventQuery(staging buffer)", __FILE__, __LINE__);
      cudaGetLastError();  // cudaErrorNotReady is not an error to report later
      if (oldest < 0 || s.last_use < p.slots[static_cast<size_t>(oldest)].last_use) oldest = static_cast<int>(i);
    }
    if (p.slots.size() < static_cast<size_t>(kSlots)) {
      Slot s;
      s.buffer = PinnedBuffer(kStagingBytes);
      OLMO2_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
      s.taken = true;
      p.slots.push_back(std::move(s));
      slot_ = static_cast<int>(p.slots.size()) - 1;
      return;
    }
    if (oldest >= 0) {  // every slot is in flight: wait for the oldest transfer
      Slot& s = p.slots[static_cast<size_t>(oldest)];
      OLMO2_CUDA_CHECK(cudaEventSynchronize(s.done));
      s.taken = true, slot_ = oldest;
      return;
    }
    // All 16 are held by other threads between acquire and release: yield and retry.
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
}

StagingBuffer::~StagingBuffer() {
  if (slot_ < 0) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.slots[static_cast<size_t>(slot_)].taken = false;
}

void* StagingBuffer::data() const {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.slots[static_cast<size_t>(slot_)].buffer.data();
}

void StagingBuffer::release() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  Slot& s = p.slots[static_cast<size_t>(slot_)];
  OLMO2_CUDA_CHECK(cudaEventRecord(s.done, compute_stream()));
  s.last_use = ++p.uses;
  s.taken = false;
  slot_ = -1;
}

}  // namespace olmo2::ops::cuda
