// safetensors reader: memory-mapped, validated header, one file or a sharded checkpoint.
// Format: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the
// data section; offsets are relative to the data section (huggingface/safetensors).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "runtime/io/mapped_file.h"

namespace olmo2 {

/// One tensor's entry in a safetensors header.
struct TensorInfo {
  std::string name;
  std::string dtype_tag;        ///< as written ("F32", "BF16", "I64", …)
  bool supported = false;       ///< dtype is F32, BF16 or F16
  DType dtype = DType::F32;     ///< valid when `supported`
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  ///< byte range within the data section
};

/// Largest header accepted, as in the reference implementation (100 MB).
constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

/// Parses and validates a safetensors header from the first bytes of a file of
/// `file_size` bytes (`bytes` holds at least min(file_size, 8 + header length) bytes).
/// Throws InputError naming `source` and the fault: a file shorter than 8 bytes or
/// than its declared header, a header over 100 MB, text that is not a JSON object,
/// an entry without a valid dtype/shape/data_offsets, negative or reversed offsets,
/// offsets past the end of the file, byte ranges that overlap, a range whose size is
/// not shape × element size, or a shape whose element count overflows.
std::map<std::string, TensorInfo> parse_safetensors_header(const uint8_t* bytes, size_t file_size,
                                                           const std::string& source);

/// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  /// Maps and validates `path`. Throws InputError (see parse_safetensors_header).
  explicit SafetensorsFile(const std::string& path);
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  /// Pointer to the first byte of a tensor in the mapping (no copy, no read).
  const uint8_t* data(const TensorInfo& t) const { return data_section_ + t.begin; }
  const std::string& path() const { return file_.path(); }
  /// Drops this process's pages of tensor `t` (see MappedFile::release).
  void release(const TensorInfo& t) const { file_.release(data(t), static_cast<size_t>(t.end - t.begin)); }

 private:
  MappedFile file_;
  const uint8_t* data_section_ = nullptr;
  std::map<std::string, TensorInfo> tensors_;
};

/// The weights of a model directory: `model.safetensors`, or the shards listed by
/// `model.safetensors.index.json`. Only the bytes of tensors that are read are touched.
class Checkpoint {
 public:
  /// Opens `dir`. Throws InputError when neither file form is present, the index is
  /// not valid JSON or names a file outside `dir`, a shard is invalid, or the index
  /// names a tensor its shard does not hold.
  static Checkpoint open(const std::string& dir);

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  /// Throws InputError "checkpoint DIR has no tensor NAME" when absent.
  const TensorInfo& info(const std::string& name) const;
  std::vector<std::string> names() const;

  /// Copies tensor `name` into a new tensor of dtype `want` (f32 or bf16), converting
  /// from its stored dtype (bf16 kept as is, f32 rounded to bf16 to nearest even, f16
  /// widened). Throws InputError when the tensor is missing, its dtype is not
  /// F32/BF16/F16, or its shape differs from `expected` (the message names tensor,
  /// expected and found).
  Tensor load(const std::string& name, const std::vector<int64_t>& expected, DType want) const;
  Tensor load_f32(const std::string& name, const std::vector<int64_t>& expected) const {
    return load(name, expected, DType::F32);
  }

  /// Copies rows [begin, end) of dimension `dim` (0 or 1; 1-D tensors: 0) of tensor
  /// `name` into a new tensor of dtype `want`, reading only the bytes of that slice
  /// from the mapping — what a tensor-parallel rank loads (rows of a column-parallel
  /// weight, columns of a row-parallel one). The full tensor must have shape
  /// `expected`. Throws InputError as load, and ShapeError for a range outside it.
  Tensor load_slice(const std::string& name, const std::vector<int64_t>& expected, int dim, int64_t begin,
                    int64_t end, DType want) const;
  Tensor load_f32_slice(const std::string& name, const std::vector<int64_t>& expected, int dim, int64_t begin,
                        int64_t end) const {
    return load_slice(name, expected, dim, begin, end, DType::F32);
  }

  /// Drops this process's pages of tensor `name` from the mapping once it has been
  /// copied out: a model then stays resident once, as its tensors, not also as the
  /// mapped file (the page cache keeps the file for a second read).
  void release(const std::string& name) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, const TensorInfo*>> where_;
};

}  // namespace olmo2
