// Code-point classes as UTF-8 byte-range sequences (docs/architecture.md §8,
// "Structured outputs"), so that the matcher runs on bytes alone. UTF-8 per RFC 3629:
// scalar values only (no surrogates), shortest form.
#include <algorithm>
#include <map>

#include "runtime/structured/grammar_impl.h"

namespace olmo2::structured {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

/// The bytes of `cp` encoded in `n` bytes.
std::array<uint8_t, 4> encode(uint32_t cp, int n) {
  std::array<uint8_t, 4> b{};
  if (n == 1) {
    b[0] = static_cast<uint8_t>(cp);
    return b;
  }
  for (int k = n - 1; k > 0; --k, cp >>= 6) b[k] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  static constexpr uint8_t kLead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  b[0] = static_cast<uint8_t>(kLead[n] | cp);
  return b;
}

/// Appends the sequences of [lo, hi] (all of one encoded length `n`): split until every
/// continuation byte below the first differing one spans its whole range 80–BF, then
/// the range of each byte position is exact.
void split(uint32_t lo, uint32_t hi, int n, std::vector<std::vector<ByteRange>>& out) {
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the low i continuation bytes' bits
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, n, out);
        split((lo | m) + 1, hi, n, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, n, out);
        split(hi & ~m, hi, n, out);
        return;
      }
    }
  }
  const auto a = encode(lo, n), b = encode(hi, n);
  std::vector<ByteRange> seq;
  for (int k = 0; k < n; ++k) seq.push_back({a[k], b[k]});
  out.push_back(std::move(seq));
}

}  // namespace

void append_utf8(uint32_t cp, std::string& out) {
  const int n = utf8_length(cp);
  const auto b = encode(cp, n);
  out.append(reinterpret_cast<const char*>(b.data()), static_cast<size_t>(n));
}

std::vector<std::vector<ByteSet>> utf8_sequences(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
  // Normalize: sorted, merged, clipped to scalar values.
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  if (negated) {
    std::vector<std::pair<uint32_t, uint32_t>> complement;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) complement.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) complement.emplace_back(next, kMaxCodePoint);
    merged = std::move(complement);
  }
  // Remove the surrogates D800–DFFF and cut at the encoded-length boundaries.
  std::vector<std::vector<ByteRange>> out;
  static constexpr uint32_t kCuts[][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
  for (auto [lo, hi] : merged) {
    for (const auto& cut : kCuts) {
      const uint32_t a = std::max(lo, cut[0]), b = std::min(hi, cut[1]);
      if (a <= b) split(a, b, utf8_length(a), out);
    }
  }
  // As byte sets; sequences of one length that differ only in their first byte merge.
  std::map<std::vector<std::pair<uint8_t, uint8_t>>, size_t> by_rest;
  std::vector<std::vector<ByteSet>> result;
  for (const auto& seq : out) {
    std::vector<std::pair<uint8_t, uint8_t>> rest{{static_cast<uint8_t>(seq.size()), 0}};
    for (size_t k = 1; k < seq.size(); ++k) rest.emplace_back(seq[k].lo, seq[k].hi);
    auto [it, fresh] = by_rest.emplace(rest, result.size());
    if (fresh) result.emplace_back(seq.size(), ByteSet{});
    auto& sets = result[it->second];
    for (size_t k = 0; k < seq.size(); ++k)
      for (unsigned b = seq[k].lo; b <= seq[k].hi; ++b) sets[k][b >> 6] |= uint64_t{1} << (b & 63);
  }
  return result;
}

}  // namespace olmo2::structured
