// Grammar text parsing and checks (docs/architecture.md §8, "Structured outputs"): good
// grammars compile, each kind of bad grammar is refused with a message naming the
// line and rule; choice grammars match exactly their strings.
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/structured/constraint.h"

namespace olmo2::structured {
namespace {

using ::testing::HasSubstr;

/// The ConstraintError that parsing `text` throws (fails the test when none is thrown).
ConstraintError parse_error(const std::string& text) {
  try {
    Grammar::parse(text);
  } catch (const ConstraintError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for grammar:\n" << text;
  return ConstraintError("", "", __FILE__, __LINE__);
}

bool matches(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g, nullptr);
  return m.accept_bytes(s) && m.complete();
}

TEST(GrammarParser, AcceptsTheDocumentedSyntax) {
  const auto g = Grammar::parse(
      "# leading comment\n"
      "root ::= greeting (\" \" name)? \"!\"{1,3}   # trailing comment\n"
      "\n"
      "greeting ::= \"hi\"\n"
      "  # a comment line between alternatives\n"
      "\n"
      "  | \"hello\"\n"
      "name ::= [A-Z] [a-z\\-]* | \"\\u00e9\\x41\\U0001F600\\t\\\"\\\\\"\n"
      "unused-rule_2 ::= (\"a\" |\n"
      "   \"b\")+ [^\\]\\[\\^]\n");
  EXPECT_TRUE(matches(g, "hi!"));
  EXPECT_TRUE(matches(g, "hello Ann-e!!!"));
  EXPECT_TRUE(matches(g, "hi \xC3\xA9" "A\xF0\x9F\x98\x80\t\"\\!"));
  EXPECT_FALSE(matches(g, "hi!!!!"));
  EXPECT_FALSE(matches(g, "hello ann!"));
}

TEST(GrammarParser, RefusesSyntaxErrorsNamingTheLine) {
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {"root ::= \"a\"\nbad \"x\"\n", "grammar line 2, rule 'bad': expected '::='"},
      {"root ::= \"abc\n", "line 1, rule 'root': unterminated string literal"},
      {"root ::= (\"a\" | \"b\"\n", "unclosed '('"},
      {"root ::= \"a\")\n", "unmatched ')'"},
      {"root ::= \"\\q\"\n", "unknown escape '\\q'"},
      {"root ::= [z-a]\n", "range out of order"},
      {"root ::= [abc\n", "unterminated character class"},
      {"root ::= \"a\"{3,2}\n", "max < min"},
      {"root ::= \"a\"{1000000}\n", "repetition count above"},
      {"root ::= \"\\uD800\"\n", "no Unicode scalar value"},
      {"root ::= \"a\" @\n", "unexpected character '@'"},
      {"::= \"a\"\n", "expected a rule name"},
  };
  for (const auto& c : cases) {
    const auto e = parse_error(c.text);
    EXPECT_THAT(e.what(), HasSubstr(c.message)) << c.text;
    EXPECT_THAT(e.path(), HasSubstr("grammar line")) << c.text;
  }
}

TEST(GrammarParser, RefusesGrammarsTheMatcherCannotRun) {
  EXPECT_THAT(parse_error("root ::= a\n").what(), HasSubstr("rule 'root': undefined rule 'a'"));
  EXPECT_THAT(parse_error("start ::= \"a\"\n").what(), HasSubstr("no rule 'root'"));
  EXPECT_THAT(parse_error("root ::= \"a\"\nroot ::= \"b\"\n").what(), HasSubstr("line 2: rule 'root' is defined twice"));
  EXPECT_THAT(parse_error("root ::= \"x\" | \"w\" a\na ::= \"y\" a\n").what(), HasSubstr("rule 'a' derives no finite string"));
  EXPECT_THAT(parse_error("root ::= []\n").what(), HasSubstr("derives no finite string"));
  EXPECT_THAT(parse_error("root ::= root \"x\" | \"y\"\n").what(), HasSubstr("left recursion: rule 'root'"));
  const auto indirect = parse_error("root ::= \"(\" a \")\"\na ::= b? c\nb ::= \"b\"\nc ::= \"z\" | d a\nd ::= \"d\"?\n");
  EXPECT_THAT(indirect.what(), HasSubstr("left recursion"));
  EXPECT_THAT(parse_error("root ::= (\"a\"?)*\n").what(), HasSubstr("left recursion"));
  // Right recursion and recursion behind a byte are fine.
  EXPECT_NO_THROW(Grammar::parse("root ::= \"a\" root | \"\"\n"));
  EXPECT_NO_THROW(Grammar::parse("root ::= \"[\" root? \"]\"\n"));
}

TEST(GrammarParser, MutatedGrammarsParseOrFailCleanly) {
  // Random byte edits of a valid grammar: each either compiles (and then runs on random
  // bytes) or is a ConstraintError; never another exception, a crash or a hang.
  const std::string base =
      "root ::= obj\nobj ::= \"{\" (kv (\",\" kv)*)? \"}\"\nkv ::= [a-z]{1,3} \":\" (obj | [0-9]+ | \"\\\"\" [^\"]* \"\\\"\")\n";
  std::mt19937 rng(37);
  const std::string alphabet = "()[]{}|*+?\"\\:=-^#,.0123456789abz \n\x80\xC3\xA9";
  int compiled = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = base;
    for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) {
      const size_t at = rng() % text.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: text[at] = c; break;
        case 1: text.insert(at, 1, c); break;
        default: text.erase(at, 1);
      }
    }
    try {
      const auto g = Grammar::parse(text);
      ++compiled;
      Matcher m(g, nullptr);
      for (int b = 0; b < 32; ++b) m.accept_bytes(std::string(1, static_cast<char>("{}a:1,\"x"[rng() % 8])));
    } catch (const ConstraintError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a ConstraintError: " << e.what() << "\n" << text;
    }
  }
  EXPECT_GT(compiled, 100);
}

TEST(ChoiceGrammar, MatchesExactlyItsStringsWithEscaping) {
  const std::vector<std::string> choices = {"yes", "no", "say \"hi\"", "back\\slash", "two\nlines\ttab", "", "é€😀", "a\x01z"};
  const auto g = Grammar::parse(choice_grammar(choices));
  for (const auto& c : choices) EXPECT_TRUE(matches(g, c)) << c;
  for (const std::string s : {"ye", "yess", "say hi", "back\\\\slash", "\x01", "no "}) EXPECT_FALSE(matches(g, s)) << s;
}

TEST(ChoiceGrammar, ManyChoicesWithSharedPrefixesFollowOneStack) {
  std::vector<std::string> choices;
  for (int i = 0; i < 5000; ++i) choices.push_back("item-" + std::to_string(i));
  choices.push_back("item");  // a choice that is a prefix of others
  const auto g = Grammar::parse(choice_grammar(choices));
  for (const std::string s : {"item", "item-0", "item-4999", "item-123"}) EXPECT_TRUE(matches(g, s)) << s;
  for (const std::string s : {"item-", "item-5000", "item-01", "ite"}) EXPECT_FALSE(matches(g, s)) << s;
  Matcher m(g, nullptr);
  ASSERT_TRUE(m.accept_bytes("item-4"));
  EXPECT_EQ(m.min_bytes_to_complete(), 0);  // "item-4" itself is a choice
  EXPECT_FALSE(m.closed());
}

TEST(ChoiceGrammar, AChoiceOfAMillionBytesCompilesAndIsFreedWithoutDeepRecursion) {
  // One node per byte: a recursive teardown of this chain overflowed the stack.
  const std::string long_choice(1'000'000, 'q');
  const auto g = Grammar::parse(choice_grammar({long_choice, "qr"}));
  EXPECT_TRUE(matches(g, "qr"));
  EXPECT_FALSE(matches(g, "qq"));
  Matcher m(g, nullptr);
  ASSERT_TRUE(m.accept_bytes("qqq"));
  EXPECT_EQ(m.min_bytes_to_complete(), 1'000'000 - 3);
}

TEST(GrammarParser, RefusesPathologicalNesting) {
  std::string deep = "root ::= ";
  deep.append(5000, '(').append("\"a\"").append(5000, ')').append("\n");
  EXPECT_THAT(parse_error(deep).what(), HasSubstr("nested deeper than"));
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 6000; ++i) chain.append("r").append(std::to_string(i)).append(" ::= r").append(std::to_string(i + 1)).append("\n");
  chain += "r6000 ::= \"z\"\n";
  EXPECT_TRUE(matches(Grammar::parse(chain), "z"));  // deep, but nothing recurses per level
}

TEST(ChoiceGrammar, RefusesAnEmptyList) {
  try {
    choice_grammar({});
    FAIL() << "no error";
  } catch (const ConstraintError& e) {
    EXPECT_THAT(e.what(), HasSubstr("empty"));
    EXPECT_EQ(e.path(), "choices");
  }
}

}  // namespace
}  // namespace olmo2::structured
