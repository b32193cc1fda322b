// The regex compiler's refusals and grammar text (runtime/structured/regex.cpp;
// docs/architecture.md §8). Which strings its grammars accept is in
// test_schema_acceptance.cpp, against Python's re.fullmatch.
#include <string>

#include <gtest/gtest.h>

#include "runtime/structured/constraint.h"

namespace olmo2::structured {
namespace {

TEST(Regex, RefusalsNameTheOffset) {
  struct Case {
    const char* pattern;
    int offset;
    const char* message;
  };
  const Case cases[] = {
      {"(a", 2, "missing ')'"},
      {"a)", 1, "unmatched ')'"},
      {"(a)\\1", 3, "backreferences"},
      {"\\k<x>", 0, "backreferences"},
      {"a(?=b)", 1, "lookaround"},
      {"(?<=a)b", 0, "lookaround"},
      {"(?!a)b", 0, "lookaround"},
      {"a^b", 1, "'^'"},
      {"a$b", 1, "'$'"},
      {"*a", 0, "nothing to repeat"},
      {"a**", 2, "nothing to repeat"},
      {"a{2}{3}", 4, "nothing to repeat"},
      {"[z-a]", 2, "out of order"},
      {"a\\b", 1, "word boundary"},
      {"\\p{L}", 0, "Unicode property"},
      {"a{3,2}", 1, "min > max"},
      {"[]", 1, "empty class"},
      {"x{,3}", 1, "{,n}"},
      {"ab\\", 3, "ends with"},
      {"\\q", 0, "unknown escape"},
      {"(?i)a", 0, "unsupported group"},
      {"[a", 0, "missing ']'"},
      {"\\xZ1", 2, "hex escape"},
      {"\\u{41}", 2, "u flag"},
      {"[\\d-z]", 3, "shorthand"},
      {"a\\ud800", 1, "lone surrogate"},
      {"x|\\udc00", 2, "lone surrogate"},
      {"\\ud83d\\u0041", 0, "lone surrogate"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.pattern);
    try {
      regex_to_grammar(c.pattern);
      ADD_FAILURE() << "compiled";
    } catch (const ConstraintError& e) {
      EXPECT_EQ(e.path(), "regex offset " + std::to_string(c.offset)) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

TEST(Regex, GrammarText) {
  EXPECT_EQ(regex_to_grammar(""), "root ::= \"\"\n");
  EXPECT_EQ(regex_to_grammar("^abc$"), "root ::= \"a\" \"b\" \"c\"\n");
  EXPECT_EQ(regex_to_grammar("a|b?"), "root ::= (\"a\" | (\"b\")?)\n");
  EXPECT_EQ(regex_to_grammar("[^\\n]{2,5}"), "root ::= ([^\\x0A]){2,5}\n");
  EXPECT_EQ(regex_to_grammar("(?:x|)y*?"), "root ::= (\"x\")? (\"y\")*\n");
}

TEST(Regex, ASurrogatePairEscapeIsTheCharacterItEncodes) {
  // JavaScript's /^\ud83d\ude00$/.test("😀") is true: the pair is one character (U+1F600).
  const auto g = Grammar::parse(regex_to_grammar("a\\ud83d\\ude00b"));
  Matcher yes(g, nullptr), no(g, nullptr);
  EXPECT_TRUE(yes.accept_bytes("a\xF0\x9F\x98\x80" "b"));
  EXPECT_TRUE(yes.complete());
  EXPECT_FALSE(no.accept_bytes("ab"));
}

TEST(Regex, DeepNestingIsRefused) {
  EXPECT_THROW(regex_to_grammar(std::string(500, '(') + "a" + std::string(500, ')')), ConstraintError);
}

}  // namespace
}  // namespace olmo2::structured
