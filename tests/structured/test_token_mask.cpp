// Token masks over the real dolma2 vocabulary (docs/architecture.md §8, "Structured
// outputs"): for several states, the mask equals the brute-force reference (every
// token's bytes fed to a copy of the matcher), EOS exactly when complete, the length
// rule lets a greedy walk finish within min_bytes_to_complete() tokens, and cache hits
// return the same mask. Prints the per-step cost, cold and cached.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <thread>
#include <filesystem>
#include <iostream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/structured/constraint.h"
#include "runtime/structured/vocab/tokenizer_vocabulary.h"
#include "tests/test_util.h"

namespace olmo2::structured {
namespace {

/// A JSON grammar (RFC 8259, compact: no whitespace) with an object at the top.
const char* kJson = R"G(root ::= object
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( string ":" value ("," string ":" value)* )? "}"
array ::= "[" ( value ("," value)* )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
)G";

std::string tokenizer_path() {
  const std::string fetched = test::source_path("data/dolma2-tokenizer.json");
  if (std::filesystem::exists(fetched)) return fetched;
  return test::source_path("../shared/data/dolma2-tokenizer.json");
}

struct Dolma2 {
  Tokenizer tokenizer = Tokenizer::from_file(tokenizer_path());
  int32_t eos = *tokenizer.token_to_id("<|endoftext|>");
  int64_t rows = (tokenizer.vocab_size() + 127) / 128 * 128;  // padded model rows
  std::shared_ptr<const Vocabulary> vocab = vocabulary_from_tokenizer(tokenizer, rows, {static_cast<int64_t>(eos)});
};

const Dolma2& dolma2() {
  static const Dolma2 d;
  return d;
}

bool bit(const std::vector<uint64_t>& bits, int64_t id) { return (bits[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }

std::vector<uint64_t> mask_of(const Matcher& m, int64_t remaining) {
  std::vector<uint64_t> bits((static_cast<size_t>(dolma2().rows) + 63) / 64, ~uint64_t{0});
  m.fill_mask(bits, remaining);
  return bits;
}

/// Checks m's mask at `remaining` against the brute-force reference over every id.
void expect_mask_is_reference(const Matcher& m, int64_t remaining, const std::string& what) {
  const auto& d = dolma2();
  const auto bits = mask_of(m, remaining);
  // Bytes left after each token (−1: the token leaves the grammar).
  std::vector<int64_t> left(static_cast<size_t>(d.rows), -1);
  int64_t fewest = INT64_MAX;
  for (int64_t id = 0; id < d.rows; ++id) {
    const auto i = static_cast<int32_t>(id);
    if (id == d.eos || id >= d.tokenizer.vocab_size() || d.tokenizer.is_special(i)) continue;
    Matcher copy = m;
    if (copy.accept_bytes(d.tokenizer.token_bytes(i))) {
      left[static_cast<size_t>(id)] = copy.min_bytes_to_complete();
      fewest = std::min(fewest, left[static_cast<size_t>(id)]);
    }
  }
  // A budget below the bytes left: only the tokens that leave the fewest.
  const int64_t most_left = !m.complete() && remaining < m.min_bytes_to_complete() ? fewest : remaining - 1;
  int64_t allowed = 0, wrong = 0;
  for (int64_t id = 0; id < d.rows; ++id) {
    bool expected = false;
    const auto i = static_cast<int32_t>(id);
    if (id == d.eos) {
      expected = m.complete();
    } else {
      expected = left[static_cast<size_t>(id)] >= 0 && left[static_cast<size_t>(id)] <= most_left;
    }
    allowed += expected;
    if (bit(bits, id) != expected && ++wrong <= 5)
      ADD_FAILURE() << what << ": token " << id << " " << nlohmann::json(d.tokenizer.token_bytes(i)).dump() << " expected "
                    << expected;
  }
  EXPECT_EQ(wrong, 0) << what;
  EXPECT_GT(allowed, 0) << what;
  std::cout << "[mask] " << what << " remaining " << remaining << ": " << allowed << " tokens allowed\n";
}

TEST(TokenMask, EqualsTheBruteForceReference) {
  const auto g = Grammar::parse(kJson);
  const auto vocab = dolma2().vocab;
  for (const std::string prefix : {"", "{", "{\"na", "{\"name\":", "{\"name\":\"Bob\\u00", "{\"a\":[1,-2.5e", "{\"a\":{}",
                                   "{\"a\":true}"}) {
    Matcher m(g, vocab);
    ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
    expect_mask_is_reference(m, 1000000, "after " + nlohmann::json(prefix).dump());
  }
  // The length rule where it binds: 3 tokens left after {"a": — a token may leave at most
  // 2 bytes to go.
  Matcher m(g, vocab);
  ASSERT_TRUE(m.accept_bytes("{\"a\":"));
  expect_mask_is_reference(m, 3, "after {\"a\": (length rule)");
  Matcher last(g, vocab);
  ASSERT_TRUE(last.accept_bytes("{\"a\":1"));
  expect_mask_is_reference(last, 1, "after {\"a\":1 (length rule, last token)");
  // A budget below the bytes left allows only the tokens that make the most progress.
  Matcher deep(g, vocab);
  ASSERT_TRUE(deep.accept_bytes("{\"a\":[[{\"b\":[\"x"));
  ASSERT_EQ(deep.min_bytes_to_complete(), 6);
  EXPECT_NE(mask_of(deep, 2), mask_of(deep, 6));
  expect_mask_is_reference(deep, 2, "inside a nested string (short budget: most progress)");
  expect_mask_is_reference(deep, 6, "inside a nested string (shortest completion)");
}

TEST(TokenMask, AShortBudgetStillCompletesWhereTheTokenizersOwnCountFits) {
  // 43 bytes that the tokenizer writes in far fewer tokens: a budget of that many tokens
  // completes, since below the bytes left only the tokens that leave the fewest are allowed.
  const auto& d = dolma2();
  for (const std::string text : {std::string("the quick brown fox jumps over the lazy dog"),
                                 std::string("{\"\xE5\x90\x8D\xE5\x89\x8D\":\"\xE2\x9C\x93\xC3\xB1\"}")}) {
    const auto g = Grammar::parse(choice_grammar({text}));
    Matcher m(g, d.vocab);
    const auto budget = static_cast<int64_t>(d.tokenizer.encode(text).size());
    ASSERT_LT(budget, m.min_bytes_to_complete());
    for (int64_t step = 0; step < budget && !m.complete(); ++step) {
      const auto bits = mask_of(m, budget - step);
      int64_t pick = -1;
      for (int64_t id = 0; id < d.rows && pick < 0; ++id)
        if (bit(bits, id)) pick = id;
      ASSERT_GE(pick, 0);
      ASSERT_TRUE(m.accept(static_cast<int32_t>(pick)));
    }
    EXPECT_TRUE(m.complete()) << text << " within " << budget << " tokens";
  }
}

TEST(TokenMask, EosExactlyWhenComplete) {
  const auto g = Grammar::parse("root ::= \"yes\" | \"yes, sir\"\n");
  const auto& d = dolma2();
  Matcher m(g, d.vocab);
  EXPECT_FALSE(bit(mask_of(m, 100), d.eos));
  EXPECT_FALSE(m.accept(d.eos));
  ASSERT_TRUE(m.accept_bytes("yes"));
  EXPECT_TRUE(bit(mask_of(m, 100), d.eos));
  EXPECT_TRUE(m.accept(d.eos));
  EXPECT_TRUE(m.terminated());
  EXPECT_FALSE(m.accept(d.tokenizer.encode(",")[0]));
}

TEST(TokenMask, GreedyLowestIdWalkCompletesWithinTheBudget) {
  const auto& d = dolma2();
  const std::vector<std::string> grammars = {
      kJson,
      "root ::= \"{\\\"name\\\":\\\"\" [a-z]{3,8} \"\\\",\\\"age\\\":\" [1-9] [0-9]? \"}\"\n",
      "root ::= [0-9]{20}\n",
      choice_grammar({"alpha", "beta gamma delta", "\xCE\xB1\xCE\xB2"}),
  };
  for (const auto& text : grammars) {
    const auto g = Grammar::parse(text);
    Matcher m(g, d.vocab);
    const int64_t budget = m.min_bytes_to_complete();
    for (int64_t step = 0; step < budget && !m.terminated(); ++step) {
      const auto bits = mask_of(m, budget - step);
      int64_t pick = -1;
      for (int64_t id = 0; id < d.rows && pick < 0; ++id)
        if (bit(bits, id)) pick = id;
      ASSERT_GE(pick, 0) << "empty mask at step " << step << " of " << text;
      ASSERT_TRUE(m.accept(static_cast<int32_t>(pick)));
    }
    EXPECT_TRUE(m.complete()) << text;
  }
}

TEST(TokenMask, CacheHitsReturnTheSameMask) {
  const auto& d = dolma2();
  const auto g = Grammar::parse(kJson);
  Matcher a(g, d.vocab), b(g, d.vocab);
  ASSERT_TRUE(a.accept_bytes("{\"key\":\"some text"));
  ASSERT_TRUE(b.accept_bytes("{\"key\":\"other"));  // another path to the same state
  const auto first = mask_of(a, 1000);
  EXPECT_EQ(mask_of(a, 1000), first);
  EXPECT_EQ(mask_of(b, 1000), first);
  EXPECT_THROW(a.fill_mask(std::span<uint64_t>(), 10), ShapeError);
}

TEST(TokenMask, SmallVocabularySemantics) {
  // ids: 0 "a", 1 "b", 2 "ab", 3 "" (no bytes), 4 "ba" (excluded), 5 EOS, 6 "abab", 7 "c"
  const auto vocab = std::make_shared<const Vocabulary>(std::vector<std::string>{"a", "b", "ab", "", "ba", "</s>", "abab", "c"},
                                                        std::vector<int32_t>{4}, std::vector<int32_t>{5});
  EXPECT_EQ(vocab->size(), 8);
  const auto g = Grammar::parse("root ::= (\"a\" | \"b\")+\n");
  Matcher m(g, vocab);
  std::vector<uint64_t> bits(3, ~uint64_t{0});  // longer than needed: the rest is zeroed
  m.fill_mask(bits, 10);
  EXPECT_EQ(bits[0], 0b1000111u);  // a, b, ab, abab; not "", the excluded "ba", EOS, "c"
  EXPECT_EQ(bits[1], 0u);
  EXPECT_EQ(bits[2], 0u);
  EXPECT_FALSE(m.accept(4));
  EXPECT_FALSE(m.accept(3));
  EXPECT_FALSE(m.accept(8));
  EXPECT_FALSE(m.accept(-1));
  ASSERT_TRUE(m.accept(6));
  m.fill_mask(bits, 1);  // complete: EOS, and tokens that leave it complete
  EXPECT_EQ(bits[0], 0b1100111u);
  m.fill_mask(bits, 0);  // no room for a token: EOS alone
  EXPECT_EQ(bits[0], 0b100000u);
  Matcher fresh(g, vocab);
  fresh.fill_mask(bits, 0);  // no budget, not complete: as if 1 (each token completes)
  EXPECT_EQ(bits[0], 0b1000111u);
  EXPECT_THROW(Vocabulary({"a"}, {1}, {}), InputError);
  EXPECT_THROW(Vocabulary({"a"}, {}, {-1}), InputError);
}

TEST(TokenMask, ConcurrentMatchersShareOneGrammar) {
  const auto g = Grammar::parse(kJson);
  const std::vector<std::string> prefixes = {"{\"x\":\"", "{\"x\":[", "{\"x\":1", "{\"y\":{\"z\":\""};
  std::vector<std::vector<uint64_t>> expected;
  for (const auto& p : prefixes) {
    Matcher m(Grammar::parse(kJson), dolma2().vocab);  // its own grammar: its own cache
    ASSERT_TRUE(m.accept_bytes(p));
    expected.push_back(mask_of(m, 1000));
  }
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 8; ++k) {
        const size_t i = static_cast<size_t>(t + k) % prefixes.size();
        Matcher m(g, dolma2().vocab);
        if (!m.accept_bytes(prefixes[i]) || mask_of(m, 1000) != expected[i]) ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

/// Microseconds per fill_mask of `m`: the first call (cold: the trie walk) and the mean
/// of later calls (cached).
std::pair<double, double> time_mask(const Matcher& m) {
  std::vector<uint64_t> bits((static_cast<size_t>(dolma2().rows) + 63) / 64);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  m.fill_mask(bits, 1000);
  const double cold = std::chrono::duration<double, std::micro>(clock::now() - t0).count();
  constexpr int kReps = 200;
  t0 = clock::now();
  for (int i = 0; i < kReps; ++i) m.fill_mask(bits, 1000);
  return {cold, std::chrono::duration<double, std::micro>(clock::now() - t0).count() / kReps};
}

TEST(TokenMask, Cost) {
  const auto g = Grammar::parse(kJson);
  const std::vector<std::pair<std::string, std::string>> states = {
      {"string interior", "{\"text\":\"Once upon a"}, {"structural", "{\"a\":[1,{\"b\":null},"}, {"number", "{\"a\":12"}};
  for (const auto& [name, prefix] : states) {
    Matcher m(g, dolma2().vocab);
    ASSERT_TRUE(m.accept_bytes(prefix));
    const auto [cold, cached] = time_mask(m);
    std::cout << "[mask cost] " << name << ": cold " << cold << " us, cached " << cached << " us\n";
    EXPECT_LT(cached, 2000.0);  // a copy of ~1600 words: far below a millisecond
  }
}

}  // namespace
}  // namespace olmo2::structured
