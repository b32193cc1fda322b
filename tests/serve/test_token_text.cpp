// How tokens appear in logprobs (runtime/serve/api/token_text.h, logprobs_json.h): display
// texts that keep every dolma2 id apart, top_logprobs that lose no alternative, chat
// entries with bytes, the −9999 floor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using namespace api_test;
using nlohmann::json;

TEST(TokenText, BytesThatAreNotWholeCharactersAreShownAsBytes) {
  // Every one of these single-byte tokens decodes to U+FFFD alone (the reference decode):
  // keyed by decoded text, they would collide.
  for (const json& t : fixture()["byte_tokens"]) EXPECT_EQ(t["decoded"], "\xEF\xBF\xBD") << t;
  EXPECT_EQ(token_display(tokenizer(), byte_token(0xE2), false), "bytes:\\xe2");
  EXPECT_EQ(token_display(tokenizer(), byte_token(0x80), false), "bytes:\\x80");
  EXPECT_EQ(token_display(tokenizer(), byte_token(0x99), false), "bytes:\\x99");
  EXPECT_EQ(token_display(tokenizer(), byte_token(0xF0), false), "bytes:\\xf0");
  EXPECT_EQ(token_raw_bytes(tokenizer(), byte_token(0xE2)), "\xE2");
  EXPECT_EQ(token_display(tokenizer(), 9906, false), "Hello");
  EXPECT_EQ(token_display(tokenizer(), fixture()["eos"]["id"], false), "<|endoftext|>");
  EXPECT_EQ(token_display(tokenizer(), 9906, true), "token_id:9906");
  // Padding rows past the tokenizer's vocabulary (100278 ids) have no text.
  EXPECT_EQ(token_display(tokenizer(), 100300, false), "token_id:100300");
  EXPECT_EQ(token_raw_bytes(tokenizer(), 100300), "");
}

TEST(TokenText, EveryDolma2IdHasItsOwnDisplayText) {
  std::set<std::string> texts;
  for (int32_t id = 0; id < tokenizer().vocab_size(); ++id) texts.insert(token_display(tokenizer(), id, false));
  EXPECT_EQ(static_cast<int64_t>(texts.size()), tokenizer().vocab_size());
}

TEST(TokenText, TopLogprobsHoldTheChosenTokenAndEveryAlternative) {
  const int32_t e2 = byte_token(0xE2), x80 = byte_token(0x80), x99 = byte_token(0x99), f0 = byte_token(0xF0);
  const SelectedToken t = token(e2, -0.25f, {{-0.25f, e2}, {-2.0f, x80}, {-3.0f, x99}, {-4.0f, f0}});
  EXPECT_EQ(completion_top_logprobs(t, 3, tokenizer(), false),
            json::parse(R"({"bytes:\\xe2": -0.25, "bytes:\\x80": -2.0, "bytes:\\x99": -3.0})"));
  EXPECT_EQ(completion_top_logprobs(t, 4, tokenizer(), false).size(), 4u);
  EXPECT_EQ(completion_top_logprobs(t, 0, tokenizer(), false), json::parse(R"({"bytes:\\xe2": -0.25})"));
  // The chosen token outside the top alternatives is added: top + 1 entries (OpenAI, vLLM).
  const SelectedToken unlikely = token(f0, -6.0f, {{-0.5f, 9906}, {-1.0f, 0}});
  EXPECT_EQ(completion_top_logprobs(unlikely, 2, tokenizer(), false),
            json::parse(R"({"bytes:\\xf0": -6.0, "Hello": -0.5, "!": -1.0})"));
  EXPECT_EQ(completion_top_logprobs(unlikely, 2, tokenizer(), true),
            json::parse(R"({"token_id:172": -6.0, "token_id:9906": -0.5, "token_id:0": -1.0})"));
  EXPECT_EQ(f0, 172);
  // Two ids with one text (here: padding rows shown by id, and a chosen token that is
  // also an alternative): the later one is keyed by its id, nothing is dropped.
  const SelectedToken padded = token(100300, -1.0f, {{-1.0f, 100300}, {-1.5f, 100301}});
  EXPECT_EQ(completion_top_logprobs(padded, 2, tokenizer(), false),
            json::parse(R"({"token_id:100300": -1.0, "token_id:100301": -1.5})"));
}

TEST(TokenText, LogprobsHaveAFloorAndJsonHasNoInfinity) {
  EXPECT_EQ(api_logprob(-INFINITY), -9999.0);
  EXPECT_EQ(api_logprob(NAN), -9999.0);
  EXPECT_EQ(api_logprob(-12345.0f), -9999.0);
  EXPECT_EQ(api_logprob(-0.5f), -0.5);
  EXPECT_EQ(completion_top_logprobs(token(9906, -INFINITY), 0, tokenizer(), false),
            json::parse(R"({"Hello": -9999.0})"));
}

TEST(TokenText, ChatEntriesCarryBytes) {
  const SelectedToken t = token(byte_token(0xE2), -0.25f, {{-0.25f, byte_token(0xE2)}, {-2.0f, 9906}});
  EXPECT_EQ(chat_logprob_entry(t, 2, tokenizer(), false), json::parse(R"({"token": "bytes:\\xe2",
      "logprob": -0.25, "bytes": [226], "top_logprobs": [
        {"token": "bytes:\\xe2", "logprob": -0.25, "bytes": [226]},
        {"token": "Hello", "logprob": -2.0, "bytes": [72, 101, 108, 108, 111]}]})"));
  EXPECT_EQ(chat_logprob_entry(t, 0, tokenizer(), true)["token"], "token_id:158");
  EXPECT_EQ(chat_logprob_entry(t, 0, tokenizer(), true)["top_logprobs"], json::array());
  EXPECT_TRUE(chat_logprob_entry(token(100300), 0, tokenizer(), false)["bytes"].is_null());
}

TEST(TokenText, Utf8Length) {
  EXPECT_EQ(utf8_length(""), 0);
  EXPECT_EQ(utf8_length("Hello!"), 6);
  EXPECT_EQ(utf8_length("a\xE2\x80\x99 b"), 4);
  EXPECT_EQ(utf8_length("\xF0\x9F\x99\x82"), 1);
}

}  // namespace
}  // namespace olmo2
