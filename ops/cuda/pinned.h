// Page-locked host memory for host → device transfers (docs/architecture.md §2, memory
// and copies). Only in builds with CUDA (OLMO2_HAVE_CUDA).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace olmo2::ops::cuda {

/// Owning page-locked host memory (cudaMallocHost / cudaFreeHost). Move-only. A DMA
/// from it (cudaMemcpyAsync) runs without the driver's own staging copy, and returns to
/// the host at once, so the buffer must outlive the transfer.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  /// Allocates `bytes` (none for 0). Throws Error naming cudaMallocHost on failure.
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

/// The largest transfer that goes through the staging pool (4 MiB): token ids,
/// positions, targets, small tensors. Larger host → device copies (weights at load)
/// copy from the caller's memory and wait for the stream.
inline constexpr size_t kStagingBytes = size_t{4} << 20;

/// A pinned staging buffer of kStagingBytes for one host → device transfer, from a pool
/// of at most 16: the caller fills data(), enqueues its cudaMemcpyAsync on the compute
/// stream, then calls release(), which records an event there; the buffer is handed
/// out again only once that event has completed (the DMA is done). So a small upload
/// returns without waiting for the stream, and the caller's memory may be reused at
/// once. When all 16 are in flight, acquiring waits for the oldest. Thread-safe.
class StagingBuffer {
 public:
  StagingBuffer();  ///< acquires one (Error naming the CUDA call on failure)
  ~StagingBuffer();  ///< returns it unreleased (no transfer was enqueued) if release() was not called
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  void* data() const;
  /// Records the transfer's completion event on the compute stream and returns the
  /// buffer to the pool. Call right after enqueuing the transfer that reads data().
  void release();

 private:
  int slot_ = -1;
};

}  // namespace olmo2::ops::cuda
