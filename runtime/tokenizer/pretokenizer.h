// Regex pre-tokenization (HF `Split` with behavior Removed, invert true) on PCRE2.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace olmo2 {

/// Splits text into the successive matches of a Unicode regex (e.g. the cl100k pattern
/// of OLMo 2's dolma2 tokenizer), as the `tokenizers` library's Split pre-tokenizer
/// with `invert: true` does; text between matches is dropped. Compiled once with
/// PCRE2 (UTF + UCP, JIT when available); `split` is thread-safe.
///
/// Unicode versions: the reference regex engine classifies by Unicode 16.0 while
/// Debian 12's PCRE2 10.42 knows Unicode 14.0. Letters and numbers new in 15.0–16.0
/// (runtime/tokenizer/unicode_classes.inc), U+0085 (White_Space, which PCRE2's \s omits) and
/// U+180E (not White_Space since Unicode 6.3, which PCRE2's \s includes) are matched
/// through stand-ins of the same class and UTF-8 length, only where this PCRE2
/// classifies them differently; the pieces returned are always of the original text.
class Pretokenizer {
 public:
  /// Compiles `pattern`. Throws InputError with PCRE2's message and offset when it
  /// does not compile.
  explicit Pretokenizer(const std::string& pattern);
  Pretokenizer(Pretokenizer&&) noexcept;
  Pretokenizer& operator=(Pretokenizer&&) noexcept;
  ~Pretokenizer();

  /// Appends the pieces of `text` (well-formed UTF-8) to `pieces`; each views `text`.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  /// Number of code points that get a stand-in (0 when PCRE2's tables are new enough).
  size_t stand_in_count() const { return stand_ins_.size(); }

 private:
  struct StandIn {
    uint32_t first, last;  ///< inclusive code point range
    char kind;             ///< 'L' letter, 'N' number, 'S' white space, 'O' other
  };
  void* code_ = nullptr;  // pcre2_code_8*
  std::vector<StandIn> stand_ins_;
  const StandIn* find_stand_in(uint32_t cp) const;
};

}  // namespace olmo2
