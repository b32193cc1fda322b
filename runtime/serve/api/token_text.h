// How tokens appear in API responses (docs/architecture.md §8, API): their display text in
// logprobs, their bytes, and the character offsets of their text in the returned text.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// A token as logprobs show it. `as_ids` (vLLM's return_tokens_as_token_ids), and any id
/// the tokenizer has no text for (padding rows of the logits past its vocabulary):
/// "token_id:ID". A token whose bytes are whole UTF-8: its text (a special token's too,
/// whether or not the returned text skips it). Otherwise — a byte-level token that holds
/// part of a character, such as dolma2's single bytes ≥ 0x80 that decode to U+FFFD —
/// OpenAI's notation: "bytes:" then each byte, printable ASCII as itself and every other
/// byte as \xNN (lowercase hex): "bytes:\xe2\x80". So distinct ids show distinct texts,
/// unlike a lossy decode (every such token would be "\uFFFD").
std::string token_display(const Tokenizer& tokenizer, int32_t id, bool as_ids);

/// The raw bytes of `id` ("" for ids the tokenizer has no text for).
std::string token_raw_bytes(const Tokenizer& tokenizer, int32_t id);

/// decode(ids, skip_special), with ids the tokenizer has no text for giving none.
std::string decode_known(const Tokenizer& tokenizer, std::span<const int32_t> ids, bool skip_special);

/// Characters (Unicode code points) of well-formed UTF-8 `text`: OpenAI's text_offset unit.
int64_t utf8_length(std::string_view text);

/// The log-probability an API shows: `x`, or −9999 (OpenAI's and vLLM's floor) when it
/// is below that or not finite (JSON has no −∞).
double api_logprob(float x);

/// text_offset of a token stream: each token's offset is the number of characters of
/// the text decoded before it (StreamDecoder, skipping special tokens when asked: an EOS
/// that adds no text adds no offset; a token holding part of a character adds none until
/// the character is complete). Callers clamp offsets to the text actually returned (a
/// stop string cuts it).
class TextOffsets {
 public:
  /// Offsets start at `start` characters (the echoed prompt's length, or text already sent).
  TextOffsets(const Tokenizer& tokenizer, bool skip_special, int64_t start = 0)
      : tokenizer_(tokenizer), decoder_(tokenizer, skip_special), chars_(start) {}
  /// The offset of `id`, then consumes it.
  int64_t push(int32_t id);

 private:
  const Tokenizer& tokenizer_;
  StreamDecoder decoder_;
  int64_t chars_;
};

}  // namespace olmo2
