// UTF-8 validation and repair (Unicode §3.9, Table 3-7 well-formed byte sequences).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace olmo2 {

/// Length of the well-formed UTF-8 sequence at s[0..n), or 0 when the bytes there do not
/// start one. When 0, `*maximal` (if given) receives the length of the maximal subpart
/// (≥ 1) that is replaced by one U+FFFD.
size_t utf8_sequence_length(const unsigned char* s, size_t n, size_t* maximal = nullptr);

/// Replaces every ill-formed sequence by U+FFFD using the "maximal subpart" practice of
/// Unicode §3.9 (what Python's `bytes.decode("utf-8", "replace")` and the `tokenizers`
/// library produce). Returns the input unchanged when it is valid.
std::string utf8_repair(std::string_view bytes);

/// True when `bytes` is well-formed UTF-8.
bool utf8_valid(std::string_view bytes);

/// Decodes the well-formed sequence of `len` bytes at s to its code point.
uint32_t utf8_decode(const unsigned char* s, size_t len);

/// Appends the UTF-8 encoding of code point `cp` (≤ 0x10FFFF, not a surrogate).
void utf8_append(std::string& out, uint32_t cp);

/// Length of the longest prefix of `bytes` that ends on a sequence boundary such that
/// the remaining tail is an incomplete-but-possibly-valid sequence (at most 3 bytes).
/// Used by streaming decoders to hold back a character that is not complete yet.
size_t utf8_complete_prefix(std::string_view bytes);

}  // namespace olmo2
