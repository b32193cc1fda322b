// The wire format of recorded reads (docs/architecture.md §13), shared by the recorder
// (every rank) and the store (rank 0): a piece is a header of int32 words bit-cast into
// floats, then its values.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace olmo2::trace {

/// One piece: `rows` consecutive positions from `position` of read `read` at `layer` of
/// the sequence tagged `tag`, reduced by `reduce` (Reduce's value):
///   None: rows × width values, columns column … column+width−1 of the read's flattened
///         feature axis (for probabilities: heads × `keys`, key k of a row at slot k);
///   Norm: rows × width partial sums of squares, groups column … (heads; one group when
///         the feature axis has no heads), summed over ranks by the store;
///   Mean: width column sums over the rows, each a double as two words (its raw bits,
///         low word first), so that the store's sum over steps is the sum in double of
///         the rows whatever the steps' split (f32 partial sums would round per step).
/// `keys`: for attention_probabilities, the key extent of each row's slot (last row's
/// position + 1), else 0.
struct PieceHeader {
  int32_t tag = 0, read = 0, layer = -1, reduce = 0, position = 0, rows = 0, column = 0, width = 0, keys = 0;
  static constexpr size_t kWords = 9;
  /// Values that follow the header.
  int64_t values() const { return reduce == 2 ? 2 * int64_t{width} : static_cast<int64_t>(rows) * width; }
};

inline void append_header(std::vector<float>& out, const PieceHeader& h) {
  const int32_t words[PieceHeader::kWords] = {h.tag, h.read, h.layer, h.reduce, h.position,
                                              h.rows, h.column, h.width, h.keys};
  for (int32_t w : words) {
    float f;
    std::memcpy(&f, &w, sizeof f);
    out.push_back(f);
  }
}

inline PieceHeader read_header(std::span<const float> in) {
  int32_t w[PieceHeader::kWords];
  std::memcpy(w, in.data(), sizeof w);
  return PieceHeader{w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]};
}

/// Appends `d`'s 64 bits as two words, low first; read_double reverses it.
inline void append_double(std::vector<float>& out, double d) {
  uint32_t w[2];
  std::memcpy(w, &d, sizeof d);
  for (uint32_t x : w) {
    float f;
    std::memcpy(&f, &x, sizeof f);
    out.push_back(f);
  }
}

inline double read_double(const float* in) {
  double d;
  std::memcpy(&d, in, sizeof d);
  return d;
}

/// Which columns of a tapped tensor this rank reports: local columns local … local+width−1
/// are the read's columns column …; heads (group_width > 0: head_dim or the key extent)
/// start at head `group`; `reports` false when another rank reports them (replicated).
struct ColumnShare {
  int64_t column = 0, local = 0, width = 0, group = 0, group_width = 0;
  bool reports = true;
};

}  // namespace olmo2::trace
