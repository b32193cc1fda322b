// Read-only memory map of a whole file (RAII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace olmo2 {

/// Maps `path` read-only. Pages are read from disk only when touched. Move-only.
class MappedFile {
 public:
  MappedFile() = default;
  /// Throws InputError naming the path when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  /// Drops this process's pages of bytes [p, p + bytes) of the mapping (the whole pages
  /// inside that range; madvise MADV_DONTNEED): they no longer count in the resident set,
  /// and are read again from the file (page cache) if touched. How a loader keeps a model
  /// resident once — as the tensors it copied out — instead of twice. A range outside
  /// the mapping is clipped; failures are ignored (it only saves memory).
  void release(const uint8_t* p, size_t bytes) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace olmo2
