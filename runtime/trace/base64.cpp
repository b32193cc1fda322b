// Base64 (RFC 4648 §4, padded) for steering vectors and returned activations
// (docs/architecture.md §13), by libcrypto's EVP_EncodeBlock / EVP_DecodeBlock. The text is
// checked here first: EVP_DecodeBlock would skip surrounding whitespace and keeps '='
// padding in its length.
#include <openssl/evp.h>

#include <algorithm>

#include "core/error.h"
#include "runtime/trace/trace_spec.h"

namespace olmo2::trace {

namespace {

bool base64_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

}  // namespace

std::string base64_encode(std::span<const uint8_t> bytes) {
  // EVP_EncodeBlock takes an int length: encode in chunks of a multiple of 3 bytes, each
  // giving 4 characters per started 3 bytes and a terminating NUL (overwritten by the next).
  constexpr size_t kChunk = size_t{3} << 28;
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  size_t written = 0;
  for (size_t at = 0; at < bytes.size(); at += kChunk) {
    const size_t n = std::min(kChunk, bytes.size() - at);
    written += static_cast<size_t>(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data() + written),
                                                   bytes.data() + at, static_cast<int>(n)));
  }
  out.resize(written);
  return out;
}

std::vector<uint8_t> base64_decode(const std::string& text, const std::string& field) {
  if (text.size() > (size_t{1} << 30)) {
    OLMO2_THROW(InputError, field, " is too long for base64 decoding: ", text.size(), " characters (at most 2^30)");
  }
  if (text.size() % 4 != 0) {
    OLMO2_THROW(InputError, field, " is not base64: its length ", text.size(),
                " is not a multiple of 4 (RFC 4648, with '=' padding)");
  }
  size_t padding = 0;
  while (padding < 2 && padding < text.size() && text[text.size() - 1 - padding] == '=') ++padding;
  for (size_t i = 0; i + padding < text.size(); ++i) {
    if (!base64_char(text[i])) {
      const unsigned char c = static_cast<unsigned char>(text[i]);
      OLMO2_THROW(InputError, field, " is not base64: character ", i, " is ",
                  (c > 32 && c < 127) ? std::string("'") + text[i] + "'" : "byte " + std::to_string(c),
                  " (only A-Z a-z 0-9 + / and '=' padding at the end)");
    }
  }
  if (text.empty()) return {};
  std::vector<uint8_t> out(text.size() / 4 * 3);
  const int n =
      EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0 || static_cast<size_t>(n) != out.size()) {
    OLMO2_THROW(InputError, field, " is not base64 (libcrypto refused it)");
  }
  out.resize(out.size() - padding);  // EVP_DecodeBlock counts the padding as zero bytes
  return out;
}

}  // namespace olmo2::trace
