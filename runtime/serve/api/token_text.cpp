#include "runtime/serve/api/token_text.h"

#include <cmath>

#include "runtime/tokenizer/utf8.h"

namespace olmo2 {

namespace {
bool known(const Tokenizer& tokenizer, int32_t id) { return id >= 0 && id < tokenizer.vocab_size(); }
}  // namespace

std::string token_display(const Tokenizer& tokenizer, int32_t id, bool as_ids) {
  if (as_ids || !known(tokenizer, id)) return "token_id:" + std::to_string(id);
  const std::string& bytes = tokenizer.token_bytes(id);
  if (utf8_valid(bytes)) return bytes;
  static const char* hex = "0123456789abcdef";
  std::string out = "bytes:";
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(ch);
    } else {
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string token_raw_bytes(const Tokenizer& tokenizer, int32_t id) {
  return known(tokenizer, id) ? tokenizer.token_bytes(id) : std::string();
}

std::string decode_known(const Tokenizer& tokenizer, std::span<const int32_t> ids, bool skip_special) {
  std::vector<int32_t> kept;
  kept.reserve(ids.size());
  for (const int32_t id : ids) {
    if (known(tokenizer, id)) kept.push_back(id);
  }
  return tokenizer.decode(kept, skip_special);
}

int64_t utf8_length(std::string_view text) {
  int64_t n = 0;
  for (const char ch : text) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

double api_logprob(float x) { return std::isfinite(x) && x > -9999.0f ? static_cast<double>(x) : -9999.0; }

int64_t TextOffsets::push(int32_t id) {
  const int64_t at = chars_;
  if (known(tokenizer_, id)) chars_ += utf8_length(decoder_.push(id));
  return at;
}

}  // namespace olmo2
