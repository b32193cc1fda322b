// docs/architecture.md §11.7 (stop strings while streaming): streamed text through stop strings
// equals the non-streamed text byte for byte, however it is split; no part of a stop string is
// released; a held-back prefix is released once it can no longer match.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "runtime/serve/stop_strings.h"

namespace olmo2 {
namespace {

/// What a non-streamed request returns: the text cut at the earliest stop string (after
/// it with `include`: the first listed among those found there).
std::string cut(const std::string& text, const std::vector<std::string>& stops, bool include = false) {
  size_t first = std::string::npos, end = 0;
  for (const std::string& s : stops) {
    if (const size_t at = text.find(s); at < first) first = at, end = at + s.size();
  }
  return first == std::string::npos ? text : text.substr(0, include ? end : first);
}

TEST(StopStrings, NothingOfTheStopStringIsReleased) {
  StopStringMatcher m({"\n\nUser:"});
  std::string sent;
  for (const char* piece : {"The answer", " is 42.", "\n", "\n", "Us", "er", ":", " more"}) {
    const std::string out = m.push(piece);
    EXPECT_EQ(out.find('\n'), std::string::npos) << "released part of the stop string: \"" << out << "\"";
    sent += out;
  }
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(sent + m.flush(), "The answer is 42.");
  EXPECT_EQ(m.push("later"), "") << "nothing after a stop";
}

TEST(StopStrings, AHeldPrefixIsReleasedWhenItCannotMatch) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(m.push("go ST"), "go ");
  EXPECT_EQ(m.held(), 2u);
  EXPECT_EQ(m.push("O"), "");
  EXPECT_EQ(m.push("RM is coming"), "STORM is coming") << "STO + RM can no longer be STOP";
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push(" S"), " ");
  EXPECT_EQ(m.flush(), "S") << "the end of generation releases the held tail";
}

TEST(StopStrings, EarliestOfSeveralAndOverlappingPrefixes) {
  StopStringMatcher m({"abc", "bcd", "xyz"});
  EXPECT_EQ(m.push("12ab"), "12");
  EXPECT_EQ(m.push("cd"), "") << "abc starts before bcd";
  EXPECT_TRUE(m.stopped());
  StopStringMatcher start({"Q:"});
  EXPECT_EQ(start.push("Q: hi"), "") << "a stop string at the very start";
  EXPECT_TRUE(start.stopped());
  EXPECT_THROW(StopStringMatcher({"ok", ""}), InputError);
}

TEST(StopStrings, MultiByteCharactersAreNeverSplit) {
  StopStringMatcher m({"🛑 end"});
  EXPECT_EQ(m.push("naïve "), "naïve ");
  EXPECT_EQ(m.push("🛑"), "");
  EXPECT_EQ(m.push(" e"), "");
  EXPECT_EQ(m.push("x"), "🛑 ex");
  EXPECT_EQ(m.push("🛑 end!"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStrings, StreamingEqualsNonStreamedTextForEverySplit) {
  std::mt19937 rng(17);
  const std::string alphabet = "ab \n:é";
  for (int trial = 0; trial < 4000; ++trial) {
    const bool include = trial % 2 == 1;
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const size_t k = rng() % 6;
      text += k == 5 ? std::string("é") : std::string(1, alphabet[k]);
    }
    const std::vector<std::string> stops = {"a:b", "\n\n", "ébé"};
    StopStringMatcher m(stops, include);
    std::string streamed;
    for (size_t at = 0; at < text.size();) {
      size_t len = 1 + rng() % 4;
      // Split only on character boundaries, as the stream decoder does.
      while (at + len < text.size() && (static_cast<unsigned char>(text[at + len]) & 0xC0) == 0x80) ++len;
      streamed += m.push(std::string_view(text).substr(at, len));
      at += len;
    }
    streamed += m.flush();
    const std::string want = cut(text, stops, include);
    ASSERT_EQ(streamed, want) << "text \"" << text << "\"" << (include ? " including the stop string" : "");
    bool found = false;
    for (const std::string& stop : stops) found = found || text.find(stop) != std::string::npos;
    EXPECT_EQ(m.stopped(), found);
  }
}

TEST(StopStrings, IncludeStopStrKeepsTheMatchAndHoldsNothingBack) {
  StopStringMatcher m({"STOP", "OP"}, true);
  EXPECT_EQ(m.push("go ST"), "go ST") << "a prefix is sent either way";
  EXPECT_EQ(m.held(), 0u);
  EXPECT_EQ(m.push("OP and more"), "OP") << "STOP spans the pushes; it starts before OP";
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("x"), "");
  EXPECT_EQ(m.flush(), "");
  StopStringMatcher tie({"ab", "abc"}, true);
  EXPECT_EQ(tie.push("xabcd"), "xab") << "at one position the first listed wins";
}

TEST(StopStrings, TextPushedBeforeMinTokensEndsNoMatch) {
  // vLLM's min_tokens: a stop string must end in text of a later token.
  StopStringMatcher m({"ab"});
  EXPECT_EQ(m.push("xab", false), "xab") << "a whole stop string inside the first min_tokens tokens";
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("za", false), "z");
  EXPECT_EQ(m.push("b!", true), "") << "begun before, ended after: it stops";
  EXPECT_TRUE(m.stopped());
  StopStringMatcher inc({"ab"}, true);
  EXPECT_EQ(inc.push("xab", false), "xab");
  EXPECT_EQ(inc.push("c", true), "c") << "the old match does not count once may_stop turns true";
  EXPECT_EQ(inc.push("ab", true), "ab");
  EXPECT_TRUE(inc.stopped());
}

}  // namespace
}  // namespace olmo2
