// Stop strings for streamed generation (docs/architecture.md §11.7): text that could still turn
// into a stop string is held back, and nothing of a stop string is ever released.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace olmo2 {

/// Streams generated text through a set of stop strings. Every push returns the text
/// that can be sent now: all of it except the longest tail that is a prefix of some
/// stop string (it may still become one). When a stop string appears, the text before
/// its earliest occurrence is released and the matcher stops: later pushes return "".
/// The concatenation of every returned piece and flush() equals the whole text cut at
/// the earliest occurrence of any stop string — what a non-streamed request returns —
/// however the text is split into pushes. Input is whole UTF-8 (StreamDecoder's output);
/// pieces end on character boundaries because a held tail starts where a stop string
/// (valid UTF-8) would. Source: the stop semantics of OpenAI's completions API.
///
/// With `include_stop` (vLLM's include_stop_str_in_output) the matched stop string is
/// kept at the end of the text: nothing is held back (a prefix is sent either way), the
/// last bytes already sent are kept to find a stop string that spans pushes, and the
/// text is cut after the match. Among stop strings found at the same position the first
/// listed wins. A push with `may_stop` false (vLLM's min_tokens: text of the first
/// min_tokens tokens) ends no match: a stop string must end in text pushed with
/// `may_stop` true, though it may begin earlier (vLLM's stop_checker search window).
class StopStringMatcher {
 public:
  /// Throws InputError for an empty stop string.
  explicit StopStringMatcher(std::vector<std::string> stops, bool include_stop = false);

  /// Appends `text`; returns what may be sent now.
  std::string push(std::string_view text, bool may_stop = true);
  /// Generation ended without a stop string: releases the held tail.
  std::string flush();
  /// True once a stop string has been seen (finish_reason "stop").
  bool stopped() const { return stopped_; }
  /// Bytes held back right now (a possible stop-string prefix).
  size_t held() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  bool include_stop_ = false;
  size_t longest_ = 0;   // the longest stop string's length
  std::string sent_;     // include_stop: the last longest_ − 1 bytes already released
  std::string held_;
  bool stopped_ = false;
};

}  // namespace olmo2
