// Structured outputs in the serving engine (docs/architecture.md §8, "Structured
// outputs"), one process, a random model over the first 512 dolma2 ids: every choice of
// a constrained request — greedy and seeded sampling, n = 3 — is a sentence of its
// grammar, checked by references independent of the matcher (std::regex, nlohmann's JSON
// parser); at max_tokens equal to the shortest sentence's bytes every output still
// completes, below the fewest tokens any complete output needs (computed here from the
// tokens' bytes) it is a valid prefix cut at "length"; constraints never leak into
// an unconstrained request batched with them (its bits equal its run alone); min_tokens
// that the constraint cannot reach ends the request with a 400 naming min_tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>

#include <nlohmann/json.hpp>

#include "runtime/structured/constraint.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/serve/choices_fixture.h"

namespace olmo2 {
namespace {

using test::Answer;

const test::EngineModel& engine_model() {
  static const test::EngineModel m;
  return m;
}

const Olmo2Model& model() {
  static const Olmo2Model m = Olmo2Model::load(engine_model().path);
  return m;
}

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(test::source_path("data/dolma2-tokenizer.json"));
  return t;
}

std::vector<Answer> run(const std::vector<CompletionParams>& batch) {
  EngineOptions o;
  o.scheduler = SchedulerOptions{.num_blocks = 256, .block_size = 8, .max_running = 16, .max_batch_tokens = 256};
  ServingEngine engine(model(), &tokenizer(), nullptr, o, EngineRanks{});
  test::EngineThread loop(engine);
  return test::run_batch(engine, batch);
}

/// A constrained request: `choices` completions, greedy or sampled.
CompletionParams constrained(const std::string& grammar, int32_t choices, double temperature, uint64_t seed,
                             int64_t max_tokens, int64_t top_k = 0, double top_p = 1.0) {
  CompletionParams p = test::request(test::ids(5, static_cast<unsigned>(seed)), choices, temperature, seed, max_tokens,
                                     top_k, top_p);
  p.ignore_eos = false;
  p.grammar = structured::Grammar::parse(grammar);
  return p;
}

/// Sampling modes: greedy, then seeded sampling plain, with top-k, with top-p.
struct Mode {
  double temperature;
  int64_t top_k;
  double top_p;
};
constexpr Mode kModes[] = {{0.0, 0, 1.0}, {1.0, 0, 1.0}, {1.3, 20, 1.0}, {0.9, 0, 0.8}};

TEST(EngineStructured, EveryChoiceIsASentenceOfItsGrammar) {
  const std::string sentence = R"(root ::= "The answer is " ("yes" | "no" | [1-9] [0-9]{0,2}) ".")";
  const std::regex sentence_ref(R"(The answer is (yes|no|[1-9][0-9]{0,2})\.)");
  // Nested lists of small integers: JSON, checked by parsing.
  const std::string lists = "root ::= \"[\" (item (\",\" item){0,3})? \"]\"\nitem ::= \"0\" | [1-9] [0-9]? | root";
  std::vector<CompletionParams> batch;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    for (const Mode& m : kModes) {
      batch.push_back(constrained(sentence, 3, m.temperature, seed, 40, m.top_k, m.top_p));
      batch.push_back(constrained(lists, 3, m.temperature, seed + 10, 60, m.top_k, m.top_p));
    }
  }
  const std::vector<Answer> got = run(batch);
  ASSERT_EQ(got.size(), batch.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].error.empty()) << i << ": " << got[i].error;
    ASSERT_EQ(got[i].choices.size(), 3u);
    for (const test::ChoiceOut& c : got[i].choices) {
      if (i % 2 == 0) {
        EXPECT_EQ(c.finish_reason, "stop") << c.text;
        EXPECT_TRUE(std::regex_match(c.text, sentence_ref)) << i << ": " << c.text;
        continue;
      }
      // The length rule completes every list within its 60 tokens; it parses, and holds
      // only lists of at most 4 items and integers in [0, 99].
      EXPECT_EQ(c.finish_reason, "stop") << c.text;
      nlohmann::json j;
      ASSERT_NO_THROW(j = nlohmann::json::parse(c.text)) << c.text;
      std::function<bool(const nlohmann::json&)> ok = [&](const nlohmann::json& v) {
        if (v.is_number_unsigned()) return v.get<uint64_t>() <= 99;
        if (!v.is_array() || v.size() > 4) return false;
        return std::all_of(v.begin(), v.end(), ok);
      };
      EXPECT_TRUE(ok(j)) << c.text;
    }
  }
  // Greedy: the three choices of one request are the same output.
  EXPECT_EQ(got[0].choices[0].text, got[0].choices[2].text);
}

/// The fewest tokens of ids 0 … 510 (the model's, EOS 511 aside) whose bytes spell some
/// string of `n` digits: a shortest-path count over the digit-only tokens' lengths.
int64_t fewest_tokens_for_digits(int64_t n) {
  std::vector<int64_t> lengths;
  for (int32_t id = 0; id < 511; ++id) {
    const std::string& b = tokenizer().token_bytes(id);
    if (!b.empty() && std::all_of(b.begin(), b.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      lengths.push_back(static_cast<int64_t>(b.size()));
    }
  }
  std::vector<int64_t> best(static_cast<size_t>(n + 1), INT64_MAX / 2);
  best[0] = 0;
  for (int64_t k = 1; k <= n; ++k) {
    for (int64_t l : lengths) {
      if (l <= k) best[static_cast<size_t>(k)] = std::min(best[static_cast<size_t>(k)], best[static_cast<size_t>(k - l)] + 1);
    }
  }
  return best[static_cast<size_t>(n)];
}

TEST(EngineStructured, MaxTokensOfTheShortestSentenceAlwaysCompletes) {
  // The length rule counts bytes (every byte is a token): max_tokens = the bytes of the
  // shortest sentence (7 digits) always completes, whatever the sampling — a digit string
  // ("stop": nothing may follow) or, through multi-letter tokens, a word of 9 or more
  // letters (complete, yet "length" when the model did not choose EOS at the last token).
  std::vector<CompletionParams> batch;
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    for (const Mode& m : kModes) {
      batch.push_back(constrained("root ::= [0-9]{7} | [a-z]{9,}", 3, m.temperature, seed, 7, m.top_k, m.top_p));
    }
  }
  const std::regex digits("[0-9]{7}"), word("[a-z]{9,}");
  for (const Answer& a : run(batch)) {
    ASSERT_TRUE(a.error.empty()) << a.error;
    for (const test::ChoiceOut& c : a.choices) {
      EXPECT_TRUE(std::regex_match(c.text, digits) || std::regex_match(c.text, word)) << c.text;
      if (std::regex_match(c.text, digits)) EXPECT_EQ(c.finish_reason, "stop") << c.text;
      EXPECT_LE(c.tokens.size(), 7u);
    }
  }
  // Fewer tokens than any complete output needs (computed here from the tokens' bytes):
  // a valid prefix cut at max_tokens.
  const int64_t fewest = fewest_tokens_for_digits(7);
  ASSERT_LT(fewest, 7) << "the vocabulary has multi-digit tokens";
  const std::vector<Answer> cut = run({constrained("root ::= [0-9]{7}", 2, 1.0, 1, fewest - 1)});
  ASSERT_TRUE(cut[0].error.empty()) << cut[0].error;
  for (const test::ChoiceOut& c : cut[0].choices) {
    EXPECT_EQ(c.finish_reason, "length");
    EXPECT_TRUE(std::regex_match(c.text, std::regex("[0-9]{0,6}"))) << c.text;
  }
}

TEST(EngineStructured, ConstraintsNeverLeakIntoOtherRequests) {
  CompletionParams plain = test::request(test::ids(9, 77), 2, 0.8, 5, 12);
  const std::vector<Answer> alone = run({plain});
  std::vector<CompletionParams> batch = {constrained(R"(root ::= "a"+)", 2, 0.8, 5, 12), plain,
                                         constrained(R"(root ::= [0-9]+ "!")", 2, 0.0, 6, 12)};
  batch[0].prompt = batch[2].prompt = plain.prompt;  // the same prompt: its prefix-cached blocks shared
  const std::vector<Answer> mixed = run(batch);
  ASSERT_TRUE(alone[0].error.empty() && mixed[0].error.empty() && mixed[1].error.empty() && mixed[2].error.empty());
  for (size_t c = 0; c < 2; ++c) {
    test::expect_same_bits(mixed[1].choices[c], alone[0].choices[c], "choice " + std::to_string(c));
    EXPECT_TRUE(std::regex_match(mixed[0].choices[c].text, std::regex("a*"))) << mixed[0].choices[c].text;
    EXPECT_TRUE(std::regex_match(mixed[2].choices[c].text, std::regex("[0-9]*!?"))) << mixed[2].choices[c].text;
  }
}

TEST(EngineStructured, UnreachableMinTokensIs400AndIgnoreEosIsRefused) {
  CompletionParams p = constrained(R"(root ::= "yes" | "no")", 1, 0.0, 3, 10);
  p.min_tokens = 8;  // "yes" takes at most 3 tokens, and then only EOS may follow
  const std::vector<Answer> got = run({p, constrained(R"(root ::= "ok")", 1, 0.0, 4, 10)});
  EXPECT_NE(got[0].error.find("min_tokens"), std::string::npos) << got[0].error;
  ASSERT_TRUE(got[1].error.empty()) << "the request beside it is unaffected";
  EXPECT_EQ(got[1].choices[0].text, "ok");
  CompletionParams eos = constrained(R"(root ::= "ok")", 1, 0.0, 4, 10);
  eos.ignore_eos = true;
  EngineOptions o;
  o.scheduler = SchedulerOptions{.num_blocks = 16, .block_size = 8, .max_running = 2, .max_batch_tokens = 64};
  ServingEngine engine(model(), &tokenizer(), nullptr, o, EngineRanks{});
  EXPECT_THROW(engine.submit(eos), InputError);
}

}  // namespace
}  // namespace olmo2
