// UploadCache (ops/upload_cache.h).
#include "ops/upload_cache.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace olmo2::ops {
namespace {
// FNV-1a over the bytes: a cheap first comparison before memcmp.
uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
}  // namespace

UploadCache::UploadCache(Upload upload, Release release, size_t entries)
    : upload_(std::move(upload)), release_(std::move(release)), capacity_(std::max<size_t>(entries, 1)) {}

UploadCache::~UploadCache() {
  for (Entry& e : entries_) release_(e.device);
}

const void* UploadCache::get(const void* src, size_t bytes) {
  const uint64_t h = fnv1a(src, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->hash == h && it->bytes.size() == bytes && std::memcmp(it->bytes.data(), src, bytes) == 0) {
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front().device;
    }
  }
  void* device = upload_(src, bytes);
  ++uploads_;
  const auto* b = static_cast<const unsigned char*>(src);
  entries_.push_front(Entry{std::vector<unsigned char>(b, b + bytes), h, device});
  while (entries_.size() > capacity_) {
    release_(entries_.back().device);
    entries_.pop_back();
  }
  return device;
}

size_t UploadCache::uploads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return uploads_;
}

}  // namespace olmo2::ops
