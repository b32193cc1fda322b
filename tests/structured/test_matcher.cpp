// The byte-level matcher (docs/architecture.md §8, "Structured outputs"): membership
// against Python's re.fullmatch on equivalent regexes (fixtures/matcher_cases.json,
// written by make_matcher_fixture.py), UTF-8 classes at the byte level, fewest bytes to
// completion, complete()/closed(), and the ambiguity bound.
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/structured/constraint.h"
#include "tests/test_util.h"

namespace olmo2::structured {
namespace {

bool matches(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g, nullptr);
  return m.accept_bytes(s) && m.complete();
}

TEST(Matcher, AgreesWithPythonRegexOnTheFixtureTable) {
  std::ifstream in(test::source_path("tests/structured/fixtures/matcher_cases.json"));
  ASSERT_TRUE(in) << "missing fixture";
  const auto cases = nlohmann::json::parse(in);
  size_t checked = 0;
  for (const auto& c : cases) {
    const auto g = Grammar::parse(c.at("grammar").get<std::string>());
    for (const auto& s : c.at("strings")) {
      const auto text = s.at("text").get<std::string>();
      const bool expected = s.at("match").get<bool>();
      EXPECT_EQ(matches(g, text), expected) << "regex " << c.at("regex") << " string " << nlohmann::json(text);
      if (expected) {  // every prefix of a member is viable, byte by byte
        Matcher m(g, nullptr);
        for (char b : text) ASSERT_TRUE(m.accept_bytes(std::string(1, b))) << nlohmann::json(text);
        EXPECT_TRUE(m.complete());
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 700u);
}

TEST(Matcher, ClassesWorkOnUtf8Bytes) {
  const auto any = Grammar::parse("root ::= [^a]\n");
  EXPECT_TRUE(matches(any, "\xC3\xA9"));          // é, two bytes
  EXPECT_TRUE(matches(any, "\xEF\xBF\xBF"));      // U+FFFF
  EXPECT_TRUE(matches(any, "\xF4\x8F\xBF\xBF"));  // U+10FFFF
  EXPECT_FALSE(matches(any, "a"));
  EXPECT_FALSE(matches(any, "\xC3"));              // truncated
  EXPECT_FALSE(matches(any, "\xC0\x80"));          // overlong NUL
  EXPECT_FALSE(matches(any, "\xE0\x80\xAF"));      // overlong '/'
  EXPECT_FALSE(matches(any, "\xED\xA0\x80"));      // surrogate D800
  EXPECT_FALSE(matches(any, "\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(matches(any, "\x80"));              // lone continuation byte
  EXPECT_FALSE(matches(any, "\xC3\xA9\xC3\xA9"));  // two code points
  const auto greek = Grammar::parse("root ::= [\\u0391-\\u03A9\\u4E00]+\n");
  EXPECT_TRUE(matches(greek, "\xCE\x91\xCE\xA9\xE4\xB8\x80"));  // ΑΩ一
  EXPECT_FALSE(matches(greek, "\xCE\xB1"));                     // α
  Matcher m(greek, nullptr);
  EXPECT_TRUE(m.accept_bytes("\xCE"));
  EXPECT_FALSE(m.complete());  // half a code point
  EXPECT_EQ(m.min_bytes_to_complete(), 1);
}

TEST(Matcher, MinBytesToComplete) {
  const auto g = Grammar::parse("root ::= \"ab\" [0-9]{3} (\"x\" | \"yz\") tail\ntail ::= \"\" | \"!\"+\n");
  Matcher m(g, nullptr);
  EXPECT_EQ(m.min_bytes_to_complete(), 6);
  ASSERT_TRUE(m.accept_bytes("ab1"));
  EXPECT_EQ(m.min_bytes_to_complete(), 3);
  ASSERT_TRUE(m.accept_bytes("23"));
  EXPECT_EQ(m.min_bytes_to_complete(), 1);
  Matcher y = m;
  ASSERT_TRUE(y.accept_bytes("y"));
  EXPECT_EQ(y.min_bytes_to_complete(), 1);
  EXPECT_FALSE(y.complete());
  ASSERT_TRUE(m.accept_bytes("x"));
  EXPECT_EQ(m.min_bytes_to_complete(), 0);
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.closed());  // "!" may follow
  EXPECT_EQ(Matcher(Grammar::parse("root ::= [\\u00e9] \"\\U0001F600\"\n"), nullptr).min_bytes_to_complete(), 6);
  const auto nested = Grammar::parse("root ::= \"{\" (\"\\\"k\\\":\" root)? \"}\"\n");
  Matcher n(nested, nullptr);
  ASSERT_TRUE(n.accept_bytes("{\"k\":{\"k\":{"));
  EXPECT_EQ(n.min_bytes_to_complete(), 3);
}

TEST(Matcher, CompleteClosedAndRejection) {
  const auto g = Grammar::parse("root ::= \"ok\" | \"okay\"\n");
  Matcher m(g, nullptr);
  EXPECT_FALSE(m.complete());
  EXPECT_FALSE(m.accept_bytes("oz"));  // refused as a whole: nothing consumed
  EXPECT_EQ(m.min_bytes_to_complete(), 2);
  ASSERT_TRUE(m.accept_bytes("ok"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.closed());
  ASSERT_TRUE(m.accept_bytes("ay"));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.closed());
  EXPECT_FALSE(m.accept_bytes("x"));
  EXPECT_FALSE(m.terminated());
}

TEST(Matcher, DeepNestingAndLongRepetitionsStayCheap) {
  const auto g = Grammar::parse("root ::= \"[\" root? \"]\"\n");
  Matcher m(g, nullptr);
  const std::string open(2000, '['), close(2000, ']');
  ASSERT_TRUE(m.accept_bytes(open));
  EXPECT_EQ(m.min_bytes_to_complete(), 2000);
  ASSERT_TRUE(m.accept_bytes(close));
  EXPECT_TRUE(m.complete());
  const auto star = Grammar::parse("root ::= [a-z]* \".\"\n");
  EXPECT_TRUE(matches(star, std::string(100000, 'q') + "."));
  const auto bounded = Grammar::parse("root ::= [a-z]{0,5000} \".\"\n");
  EXPECT_TRUE(matches(bounded, std::string(5000, 'q') + "."));
  EXPECT_FALSE(matches(bounded, std::string(5001, 'q') + "."));
}

TEST(Matcher, ExplodingAmbiguityIsAClearError) {
  // Each "a" doubles the distinct parse stacks (two return frames per nesting level).
  const auto g = Grammar::parse("root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"\"\n");
  Matcher m(g, nullptr);
  try {
    m.accept_bytes(std::string(40, 'a'));
    FAIL() << "no error";
  } catch (const ConstraintError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("too ambiguous"));
  }
}

}  // namespace
}  // namespace olmo2::structured
