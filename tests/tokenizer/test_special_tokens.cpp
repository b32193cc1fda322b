// The tokenizer's roles (EOS, padding, BOS) and the check of a model directory's special
// ids against them (runtime/tokenizer/special_tokens.h; docs/architecture.md §8). The ids
// and texts are those of the dolma2 tokenizer.json's added_tokens and of the OLMo 2
// instruct tokenizer_config.json committed under tests/serve/fixtures.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/tokenizer/special_tokens.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string tokenizer_path() {
  const std::string fetched = test::source_path("data/dolma2-tokenizer.json");
  return std::filesystem::exists(fetched) ? fetched : test::source_path("../shared/data/dolma2-tokenizer.json");
}

const Tokenizer& dolma2() {
  static const Tokenizer tok = Tokenizer::from_file(tokenizer_path());
  return tok;
}

/// `text` written to DIR/tokenizer_config.json; returns the path.
std::string write_config(const test::TempDir& dir, const std::string& text) {
  const std::string path = dir.file("tokenizer_config.json");
  std::ofstream(path) << text;
  return path;
}

TEST(TokenizerRoles, WithoutTokenizerConfigTheWellKnownAddedTokensDecide) {
  test::TempDir dir;
  const TokenizerRoles r = tokenizer_roles(dolma2(), dir.file("tokenizer_config.json"));  // no such file
  ASSERT_TRUE(r.eos);
  EXPECT_EQ(r.eos->id, 100257);
  EXPECT_EQ(r.eos->text, "<|endoftext|>");
  EXPECT_EQ(r.eos->source, "the added token <|endoftext|>");
  ASSERT_TRUE(r.pad);
  EXPECT_EQ(r.pad->id, 100277);
  EXPECT_EQ(r.pad->text, "<|pad|>");
  EXPECT_FALSE(r.bos);
  // An empty path reads no file either.
  const TokenizerRoles none = tokenizer_roles(dolma2(), "");
  ASSERT_TRUE(none.eos);
  EXPECT_EQ(none.eos->id, 100257);
}

TEST(TokenizerRoles, TheInstructTokenizerConfigDecides) {
  const TokenizerRoles r =
      tokenizer_roles(dolma2(), test::source_path("tests/serve/fixtures/olmo2_instruct_tokenizer_config.json"));
  ASSERT_TRUE(r.eos && r.pad && r.bos);
  EXPECT_EQ(r.eos->id, 100257);
  EXPECT_EQ(r.eos->source, "tokenizer_config.json eos_token");
  EXPECT_EQ(r.pad->id, 100277);
  EXPECT_EQ(r.pad->text, "<|pad|>");
  EXPECT_EQ(r.bos->id, 100257);  // that file's bos_token is <|endoftext|>
  EXPECT_EQ(r.bos->text, "<|endoftext|>");
}

TEST(TokenizerRoles, ContentObjectsNullsAndAbsentFields) {
  test::TempDir dir;
  const TokenizerRoles r = tokenizer_roles(
      dolma2(), write_config(dir, R"({"eos_token": {"content": "<|im_end|>", "special": true, "lstrip": false},
                                       "pad_token": null, "unk_token": "<|endoftext|>"})"));
  ASSERT_TRUE(r.eos);
  EXPECT_EQ(r.eos->id, 100265);
  EXPECT_EQ(r.eos->text, "<|im_end|>");
  EXPECT_FALSE(r.pad) << "null: no padding token, not the well-known <|pad|>";
  EXPECT_FALSE(r.bos);
}

TEST(TokenizerRoles, BadTokenizerConfigsAreNamed) {
  test::TempDir dir;
  const std::string path = dir.file("tokenizer_config.json");
  struct Bad {
    std::string text, message;
  };
  const Bad cases[] = {
      {R"({"eos_token": 100257})",
       "eos_token must be null, a string or an object with a string \"content\", got 100257"},
      {R"({"pad_token": {"id": 3}})", "pad_token must be null, a string or an object"},
      {R"({"bos_token": {"content": 7}})", "bos_token must be null"},
      {R"({"eos_token": "<|no_such_token|>"})", "eos_token \"<|no_such_token|>\" is no token of the tokenizer"},
      {R"(["eos_token"])", "is not a JSON object"},
      {R"({"eos_token": )", "is not valid JSON: "},
  };
  for (const Bad& b : cases) {
    write_config(dir, b.text);
    const std::string msg = test::input_error([&] { tokenizer_roles(dolma2(), path); });
    EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr(b.message))) << b.text;
  }
}

TEST(DescribeToken, AddedTokensAsIsOthersQuoted) {
  EXPECT_EQ(describe_token(dolma2(), 100257), "<|endoftext|>");
  EXPECT_EQ(describe_token(dolma2(), 0), "\"!\"");
  EXPECT_EQ(describe_token(dolma2(), 100300), "id past the tokenizer");
  EXPECT_EQ(describe_token(dolma2(), -1), "id past the tokenizer");
}

class SpecialTokenMismatches : public ::testing::Test {
 protected:
  const TokenizerRoles roles = tokenizer_roles(dolma2(), "");
  std::vector<std::string> check(const DeclaredSpecialIds& d) const {
    return special_token_mismatches(d, dolma2(), roles);
  }
};

TEST_F(SpecialTokenMismatches, AConsistentOlmo2ConfigHasNone) {
  EXPECT_TRUE(check({"config.json", {100257}, 100277, std::nullopt}).empty());
  EXPECT_TRUE(check({"config.json", {}, std::nullopt, std::nullopt}).empty()) << "nothing declared, nothing wrong";
}

TEST_F(SpecialTokenMismatches, EosZeroIsNamedWithTheTokenizersEos) {
  const auto m = check({"config.json", {0}, 100277, std::nullopt});
  ASSERT_EQ(m.size(), 1u);
  EXPECT_THAT(m[0], AllOf(HasSubstr("config.json eos_token_id 0"), HasSubstr("\"!\""), HasSubstr("<|endoftext|>"),
                          HasSubstr("100257")));
  EXPECT_EQ(m[0], "config.json eos_token_id 0 is \"!\", not a special token of the tokenizer (its end-of-text token "
                  "is <|endoftext|> (id 100257))");
}

TEST_F(SpecialTokenMismatches, SwappedEosAndPadGiveTwoMessages) {
  const auto m = check({"config.json", {100277}, 100257, std::nullopt});
  ASSERT_EQ(m.size(), 2u);
  EXPECT_THAT(m[0], AllOf(HasSubstr("eos_token_id 100277 is <|pad|>"),
                          HasSubstr("end-of-text token <|endoftext|> (id 100257)")));
  EXPECT_THAT(m[1], AllOf(HasSubstr("pad_token_id 100257 is <|endoftext|>"),
                          HasSubstr("padding token <|pad|> (id 100277)")));
}

TEST_F(SpecialTokenMismatches, GenerationConfigMayListAnEndOfTurnToken) {
  DeclaredSpecialIds g{"generation_config.json", {100257, 100265}, 100277, std::nullopt};
  g.eos_must_include_tokenizer_eos = false;
  EXPECT_TRUE(check(g).empty());
  g.eos = {100265};  // the end-of-turn token alone: still fine there
  EXPECT_TRUE(check(g).empty());
}

TEST_F(SpecialTokenMismatches, ConfigEosWithoutTheTokenizersEos) {
  const auto m = check({"config.json", {100265}, std::nullopt, std::nullopt});
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], "config.json eos_token_id 100265 is <|im_end|>, not the tokenizer's end-of-text token "
                  "<|endoftext|> (id 100257)");
}

TEST_F(SpecialTokenMismatches, AnIdPastTheTokenizer) {
  // The model's vocab (100352) is larger than the tokenizer's 100278 ids: 100300 is a
  // valid row of the embedding but no token.
  const auto m = check({"config.json", {100257}, 100300, std::nullopt});
  ASSERT_EQ(m.size(), 1u);
  EXPECT_THAT(m[0], AllOf(HasSubstr("pad_token_id 100300 is past the tokenizer's 100278 ids"),
                          HasSubstr("<|endoftext|> (id 100257)")));
}

TEST_F(SpecialTokenMismatches, BosAgainstTheTokenizerConfigsBos) {
  const TokenizerRoles instruct =
      tokenizer_roles(dolma2(), test::source_path("tests/serve/fixtures/olmo2_instruct_tokenizer_config.json"));
  EXPECT_TRUE(special_token_mismatches({"config.json", {100257}, 100277, 100257}, dolma2(), instruct).empty());
  const auto m = special_token_mismatches({"config.json", {100257}, 100277, 100264}, dolma2(), instruct);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], "config.json bos_token_id 100264 is <|im_start|>, not the tokenizer's beginning-of-text token "
                  "<|endoftext|> (id 100257)");
  // Without a BOS role (tokenizer.json alone) any added token is accepted as BOS.
  EXPECT_TRUE(check({"config.json", {100257}, 100277, 100264}).empty());
}

}  // namespace
}  // namespace olmo2
