#include "runtime/tokenizer/utf8.h"

namespace olmo2 {

namespace {
// Allowed range of the second byte for each lead byte; the rest are 80..BF.
bool lead_info(unsigned char b, size_t* len, unsigned char* lo, unsigned char* hi) {
  *lo = 0x80, *hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) *len = 2;
  else if (b == 0xE0) *len = 3, *lo = 0xA0;
  else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) *len = 3;
  else if (b == 0xED) *len = 3, *hi = 0x9F;
  else if (b == 0xF0) *len = 4, *lo = 0x90;
  else if (b >= 0xF1 && b <= 0xF3) *len = 4;
  else if (b == 0xF4) *len = 4, *hi = 0x8F;
  else return false;
  return true;
}
}  // namespace

size_t utf8_sequence_length(const unsigned char* s, size_t n, size_t* maximal) {
  if (maximal) *maximal = 1;
  if (n == 0) return 0;
  if (s[0] < 0x80) return 1;
  size_t len;
  unsigned char lo, hi;
  if (!lead_info(s[0], &len, &lo, &hi)) return 0;
  size_t i = 1;
  for (; i < len && i < n; ++i) {
    const unsigned char b = s[i];
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
  }
  if (i == len) return len;
  if (maximal) *maximal = i;
  return 0;
}

std::string utf8_repair(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  std::string out;
  size_t i = 0, copied = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    size_t maximal;
    const size_t len = utf8_sequence_length(s + i, n - i, &maximal);
    if (len) {
      i += len;
      continue;
    }
    if (out.empty()) out.reserve(n + 8);
    out.append(bytes.substr(copied, i - copied));
    out.append("\xEF\xBF\xBD");
    i += maximal;
    copied = i;
  }
  if (copied == 0) return std::string(bytes);
  out.append(bytes.substr(copied));
  return out;
}

bool utf8_valid(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < bytes.size();) {
    const size_t len = utf8_sequence_length(s + i, bytes.size() - i);
    if (!len) return false;
    i += len;
  }
  return true;
}

uint32_t utf8_decode(const unsigned char* s, size_t len) {
  switch (len) {
    case 1: return s[0];
    case 2: return (uint32_t(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return (uint32_t(s[0] & 0x0F) << 12) | (uint32_t(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
      return (uint32_t(s[0] & 0x07) << 18) | (uint32_t(s[1] & 0x3F) << 12) |
             (uint32_t(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
  }
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_complete_prefix(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  // Look back at most 3 bytes for the start of an incomplete but still valid sequence.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t start = n - back;
    if ((s[start] & 0xC0) == 0x80) continue;  // continuation byte: keep looking back
    size_t maximal;
    const size_t len = utf8_sequence_length(s + start, back, &maximal);
    // Incomplete: not a full sequence, and every byte present is a valid prefix.
    if (len == 0 && maximal == back && s[start] >= 0xC2 && s[start] <= 0xF4) return start;
    return n;
  }
  return n;
}

}  // namespace olmo2
