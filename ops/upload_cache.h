// Device copies of small host descriptors, kept by content (docs/architecture.md §8,
// "Paged attention on the GPU"): every layer of a serving step passes the same block
// tables and tile descriptors to paged attention, so the first layer uploads them and
// the others reuse that device copy, where uploading per layer made the host wait for
// the previous upload each time. Independent of CUDA: the upload and release are
// functions, so the CPU tests count them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <vector>

namespace olmo2::ops {

class UploadCache {
 public:
  /// Copies `bytes` at `src` to new device memory and returns it (may throw).
  using Upload = std::function<void*(const void* src, size_t bytes)>;
  /// Frees device memory from Upload (stream-ordered: later work may reuse it).
  using Release = std::function<void(void*)>;

  /// Keeps the `entries` most recently used contents (≥ 1).
  UploadCache(Upload upload, Release release, size_t entries = 4);
  ~UploadCache();  ///< releases every entry
  UploadCache(const UploadCache&) = delete;
  UploadCache& operator=(const UploadCache&) = delete;

  /// A device copy of the `bytes` at `src`: an entry with the same bytes if one is kept,
  /// else a new upload (the least recently used entry is released beyond `entries`).
  /// The pointer stays valid until `entries` other contents have been asked for.
  const void* get(const void* src, size_t bytes);
  /// Uploads made so far (for tests and the benchmark).
  size_t uploads() const;

 private:
  struct Entry {
    std::vector<unsigned char> bytes;
    uint64_t hash;
    void* device;
  };
  Upload upload_;
  Release release_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // most recently used first
  size_t uploads_ = 0;
};

}  // namespace olmo2::ops
