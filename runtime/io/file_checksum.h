// Checksums of checkpoint files (docs/architecture.md §7 "Checkpoint integrity"): XXH3-128
// from Debian's libxxhash, computed while a file is written and verified by reading it back
// in bounded chunks, so neither side ever holds a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace olmo2 {

/// Name of the checksum algorithm as written in training_state.json ("files" entries).
constexpr char kChecksumAlgorithm[] = "xxh3_128";

/// Incremental XXH3-128 (xxHash 0.8, Collet) over a byte stream.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;

  /// Adds `n` bytes at `data` (any alignment; n may be 0).
  void update(const void* data, size_t n);
  /// Bytes added so far.
  uint64_t bytes() const { return bytes_; }
  /// The digest of everything added so far, as 32 lowercase hex digits (high 64 bits
  /// first, as `xxhsum -H2` prints it). Does not reset the stream.
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  uint64_t bytes_ = 0;
};

/// Checksum and size of one file.
struct FileChecksum {
  uint64_t bytes = 0;
  std::string xxh3_128;  ///< 32 lowercase hex digits
};

/// Reads `path` in 4 MiB chunks and returns its size and XXH3-128. Throws InputError
/// naming the file and the OS reason when it cannot be opened or read.
FileChecksum checksum_file(const std::string& path);

}  // namespace olmo2
