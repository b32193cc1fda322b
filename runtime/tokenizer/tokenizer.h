// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (OLMo 2's dolma2).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/bpe.h"
#include "runtime/tokenizer/pretokenizer.h"

namespace olmo2 {

/// Encodes text to token ids and back, as the `tokenizers` library does for a
/// byte-level BPE tokenizer.json: added tokens (special or not) are matched whole
/// first (leftmost, longest on ties); the text between them is split by the
/// pre-tokenizer regex, each piece's bytes are BPE-encoded. No BOS/EOS is added:
/// "Hello!" → [9906, 0] with dolma2. Immutable after loading; safe to share between
/// threads.
class Tokenizer {
 public:
  /// Loads `path`. Throws InputError naming the path and the unsupported part: a model
  /// other than BPE, a normalizer, a pre-tokenizer other than Split(regex)+ByteLevel or
  /// ByteLevel alone, byte fallback, a malformed vocabulary or merge list.
  static Tokenizer from_file(const std::string& path);

  /// Token ids of `text`. Ill-formed UTF-8 is first repaired (each maximal ill-formed
  /// subpart becomes U+FFFD, as Python's `decode("utf-8", "replace")`).
  std::vector<int32_t> encode(std::string_view text) const;

  /// The text of `ids`: their bytes joined, then ill-formed UTF-8 replaced by U+FFFD
  /// (lossy, as `tokenizers`' decode). `skip_special` drops added tokens marked special.
  /// Throws InputError naming an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  /// Raw bytes of one token (possibly an incomplete UTF-8 sequence).
  const std::string& token_bytes(int32_t id) const;
  /// Ids 0 … vocab_size()−1 are defined.
  int64_t vocab_size() const { return static_cast<int64_t>(bpe_.size()); }
  /// Id of an added token or vocabulary entry by its text, if any.
  std::optional<int32_t> token_to_id(std::string_view text) const;
  /// True for added tokens marked special (dropped by decode with skip_special).
  bool is_special(int32_t id) const;
  /// True for every added token, special or not (matched whole before the regex).
  bool is_added(int32_t id) const;

 private:
  struct Added {
    std::string content;
    int32_t id;
    bool special;
  };
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

  Bpe bpe_;
  std::vector<std::unique_ptr<Pretokenizer>> pretokenizers_;  // applied in order
  std::vector<Added> added_;
  std::vector<bool> special_;
  bool add_prefix_space_ = false;
};

/// Incremental decoding for streaming: text is released only when it is whole UTF-8;
/// the bytes of an unfinished character are held until a later token completes it.
/// The concatenation of every `push` and the final `flush` equals
/// `Tokenizer::decode` of all ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tok_(tokenizer), skip_special_(skip_special) {}
  /// Text completed by `id` (may be empty).
  std::string push(int32_t id);
  /// Whatever is still held, with an unfinished character replaced by U+FFFD.
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace olmo2
