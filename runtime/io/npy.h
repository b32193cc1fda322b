// numpy .npy token files: a streaming uint32 writer and a memory-mapped 1-D reader.
// Format (numpy.lib.format, NEP 1): the magic "\x93NUMPY", major and minor version
// bytes, the header length (uint16 little-endian for v1.0, uint32 for v2.0 and v3.0),
// then a Python dict literal {'descr': '<u4', 'fortran_order': False, 'shape': (N,), }
// padded with spaces and ended by '\n' so the data starts at a multiple of 64 bytes,
// then the elements, little-endian, in C order. OLMo-core's token files are 1-D uint32
// (or uint16 for vocabularies under 65536) arrays in this layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "runtime/io/mapped_file.h"

namespace olmo2 {

/// Element types accepted in token files.
enum class NpyDType { U16, U32 };

/// Bytes per element: 2 for U16, 4 for U32.
size_t npy_itemsize(NpyDType dtype);

/// numpy's descr string: "<u2" for U16, "<u4" for U32.
const char* npy_descr(NpyDType dtype);

/// What a validated .npy header says about the array that follows it.
struct NpyHeader {
  int major = 1, minor = 0;  ///< format version (1.0, 2.0 or 3.0)
  NpyDType dtype = NpyDType::U32;
  uint64_t count = 0;      ///< number of elements (the 1-D shape)
  size_t data_offset = 0;  ///< bytes from the start of the file to the first element
};

/// Parses and validates the header of the whole .npy file `bytes` (`size` bytes).
/// Throws InputError naming `source` and the fault: not an npy file (bad magic), an
/// unsupported version, a header longer than the file (truncated), header text that
/// is not a Python dict literal with exactly the keys 'descr', 'fortran_order' and
/// 'shape', a dtype other than '<u4' or '<u2' (named), fortran_order True, a shape
/// that is not 1-D, or a data section shorter or longer than shape × itemsize.
NpyHeader parse_npy_header(const uint8_t* bytes, size_t size, const std::string& source);

/// The v1.0 preamble NpyWriter writes for `count` elements of `dtype`: magic, version,
/// length, dict and padding, ending in '\n'. Its length is a multiple of 64 and the
/// same for every count (the shape field has room for any uint64), so the header can
/// be rewritten in place once the count is known — as numpy does for growable arrays.
std::string npy_v1_header(NpyDType dtype, uint64_t count);

/// A memory-mapped, validated 1-D .npy token file. Pages are read only when touched.
/// Move-only.
class NpyFile {
 public:
  /// Maps and validates `path`. Throws InputError when the file cannot be opened (the
  /// message names the path) or its header is invalid (see parse_npy_header).
  explicit NpyFile(const std::string& path);

  NpyDType dtype() const { return header_.dtype; }
  /// Number of elements.
  uint64_t size() const { return header_.count; }
  const NpyHeader& header() const { return header_; }
  const std::string& path() const { return file_.path(); }

  /// Element `i` widened to uint32. Precondition: i < size() (unchecked).
  uint32_t operator[](uint64_t i) const;

  /// Copies elements [begin, begin + out.size()) into `out`, widened to uint32.
  /// Throws ShapeError when the range passes the end of the array.
  void read(uint64_t begin, std::span<uint32_t> out) const;

 private:
  MappedFile file_;
  NpyHeader header_;
};

/// Streams uint32 tokens into a 1-D '<u4' .npy file of unknown final length.
/// The data goes to `path + ".tmp"`; close() writes the final shape into the header
/// (same header length) and renames the file to `path`, so a crash never leaves a
/// truncated file under the final name. Not copyable or movable.
class NpyWriter {
 public:
  /// Creates `path + ".tmp"` (replacing any old one) and writes a v1.0 header.
  /// Throws Error naming the path when the file cannot be created or written.
  explicit NpyWriter(const std::string& path);
  NpyWriter(const NpyWriter&) = delete;
  NpyWriter& operator=(const NpyWriter&) = delete;
  /// Closes the file if still open, swallowing errors. When the destructor runs
  /// because an exception is propagating, the partial file is abandoned instead
  /// (see abandon()), so a failed run never publishes a partial file.
  ~NpyWriter();

  /// Appends `tokens`. Throws Error naming the path when the write fails or the
  /// writer is already closed.
  void append(std::span<const uint32_t> tokens);

  /// Rewrites the header with the final element count, flushes and syncs the data,
  /// and renames the temporary file to `path`. Idempotent. Throws Error naming the
  /// path when any step fails (the temporary file is then removed).
  void close();

  /// Discards the partial file: closes and removes `path + ".tmp"`; `path` is not
  /// touched. No-op once closed. Never throws.
  void abandon() noexcept;

  /// Elements appended so far.
  uint64_t count() const { return count_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
  uint64_t count_ = 0;
  int uncaught_at_start_ = 0;
};

}  // namespace olmo2
