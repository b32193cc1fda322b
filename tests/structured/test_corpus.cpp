// The corpus walker (docs/architecture.md §8, "Structured outputs"; §10): compiles every
// entry of tests/structured/corpus/ (JSON Schemas, regexes, choice lists) and walks a
// Matcher over the dolma2 vocabulary, choosing each next token pseudo-randomly among
// the ids fill_mask allows, within a token budget of min_bytes_to_complete() + slack.
// It writes one JSON line per walk; run_corpus.py drives it and judges the outputs with
// the reference implementations (Python's jsonschema, re.fullmatch, list membership),
// so nothing here decides whether an output is right.
//
// A walk line: {"id", "seed", "budget", "tokens", "output_hex" (the output's bytes),
// "complete", "terminated", "compile_us", "mask_us" (fill_mask per step), "problem"
// (the engine broke its own contract: an empty mask, a masked-in token that accept()
// refused, an incomplete output at the budget)}; an entry that does not compile gives
// {"id", "error", "path"} instead.
//
// With --bench N it also times fill_mask on cached states: for every walk's states,
// one matcher (batch 1) and groups of N matchers (batch N, the masks of one scheduler
// step), and prints a {"bench": ...} line of medians and maxima in µs.
//
// Usage: structured_corpus_walk CORPUS_DIR TOKENIZER_JSON OUT.jsonl [--seeds S]
//        [--slack K,K,...] [--only PREFIX] [--bench N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/structured/constraint.h"
#include "runtime/structured/vocab/tokenizer_vocabulary.h"
#include "runtime/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace olmo2;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kModelVocab = 100352;  // the dolma2 models' embedding rows (padded)
constexpr int32_t kEos = 100257;         // <|endoftext|>
std::unique_ptr<Tokenizer> g_tokenizer;  // spells the outputs

double micros_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

/// The matcher's view of the dolma2 vocabulary, as the server builds it.
std::shared_ptr<const structured::Vocabulary> load_vocabulary(const std::string& tokenizer_path) {
  g_tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_file(tokenizer_path));
  return structured::vocabulary_from_tokenizer(*g_tokenizer, kModelVocab, {static_cast<int64_t>(kEos)});
}

struct Entry {
  std::string id;
  std::string kind;  // schema, regex, choice
  json value;
};

std::vector<Entry> load_corpus(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().extension() == ".json") files.push_back(f.path());
  std::sort(files.begin(), files.end());
  std::vector<Entry> entries;
  for (const auto& path : files) {
    std::ifstream in(path);
    for (const auto& e : json::parse(in)) {
      if (e.contains("schema")) entries.push_back({e["id"], "schema", e["schema"]});
      else if (e.contains("pattern")) entries.push_back({e["id"], "regex", e["pattern"]});
      else if (e.contains("choices")) entries.push_back({e["id"], "choice", e["choices"]});
    }
  }
  return entries;
}

std::string grammar_text(const Entry& e) {
  if (e.kind == "schema") return structured::json_schema_to_grammar(e.value.dump());
  if (e.kind == "regex") return structured::regex_to_grammar(e.value.get<std::string>());
  return structured::choice_grammar(e.value.get<std::vector<std::string>>());
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

/// One walk: tokens chosen by `rng` among the allowed ids (EOS, when allowed, one time
/// in four) until EOS or the budget. `states` collects the matcher before each step.
json walk(const std::shared_ptr<const structured::Grammar>& grammar,
          const std::shared_ptr<const structured::Vocabulary>& vocab, int64_t slack, uint32_t seed,
          std::vector<structured::Matcher>* states) {
  structured::Matcher m(grammar, vocab);
  const int64_t budget = m.min_bytes_to_complete() + slack;
  std::mt19937 rng(seed);
  std::vector<uint64_t> bits((kModelVocab + 63) / 64);
  std::vector<int32_t> allowed;
  std::vector<double> mask_us;
  std::string output, problem;
  int64_t used = 0;
  while (used < budget && !m.terminated()) {
    if (states) states->push_back(m);
    auto t0 = Clock::now();
    m.fill_mask(bits, budget - used);
    mask_us.push_back(micros_since(t0));
    allowed.clear();
    bool eos_allowed = false;
    for (int64_t id = 0; id < kModelVocab; ++id) {
      if (!(bits[id / 64] >> (id % 64) & 1)) continue;
      if (id == kEos) eos_allowed = true;
      else allowed.push_back(static_cast<int32_t>(id));
    }
    if (eos_allowed != m.complete()) {
      problem = "EOS allowed " + std::to_string(eos_allowed) + " but complete() is " + std::to_string(m.complete());
      break;
    }
    if (allowed.empty() && !eos_allowed) {
      problem = "empty mask after " + std::to_string(used) + " tokens";
      break;
    }
    int32_t pick = kEos;
    if (!allowed.empty() && !(eos_allowed && rng() % 4 == 0)) pick = allowed[rng() % allowed.size()];
    if (!m.accept(pick)) {
      problem = "fill_mask allowed token " + std::to_string(pick) + " but accept() refused it";
      break;
    }
    if (pick != kEos) output += g_tokenizer->token_bytes(pick);
    ++used;
  }
  if (problem.empty() && !m.complete()) problem = "incomplete after the budget of " + std::to_string(budget) + " tokens";
  return {{"budget", budget}, {"tokens", used}, {"output_hex", hex(output)}, {"complete", m.complete()},
          {"terminated", m.terminated()}, {"mask_us", mask_us}, {"problem", problem}};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// fill_mask on states met while walking, now cached: batch 1 is one matcher per step,
/// batch N the N masks one scheduler step of N constrained sequences needs.
json bench(const std::vector<structured::Matcher>& states, int64_t batch) {
  std::vector<uint64_t> bits((kModelVocab + 63) / 64);
  std::vector<double> one, many;
  for (const auto& m : states) {
    auto t0 = Clock::now();
    m.fill_mask(bits, 1 << 20);
    one.push_back(micros_since(t0));
  }
  for (size_t i = 0; i + batch <= states.size(); i += batch) {
    auto t0 = Clock::now();
    for (int64_t j = 0; j < batch; ++j) states[i + j].fill_mask(bits, 1 << 20);
    many.push_back(micros_since(t0));
  }
  return {{"states", states.size()}, {"batch1_median_us", median(one)},
          {"batch1_max_us", one.empty() ? 0 : *std::max_element(one.begin(), one.end())},
          {"batch", batch}, {"batchN_median_us", median(many)},
          {"batchN_max_us", many.empty() ? 0 : *std::max_element(many.begin(), many.end())}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: structured_corpus_walk CORPUS_DIR TOKENIZER_JSON OUT.jsonl [--seeds S] "
                 "[--slack K,K,...] [--only PREFIX] [--bench N]\n";
    return 2;
  }
  int seeds = 2;
  std::vector<int64_t> slacks = {0, 12};
  std::string only;
  int64_t bench_batch = 0;
  for (int i = 4; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--seeds") seeds = std::stoi(value);
    else if (flag == "--only") only = value;
    else if (flag == "--bench") bench_batch = std::stoll(value);
    else if (flag == "--slack") {
      slacks.clear();
      for (size_t p = 0; p < value.size();) {
        size_t q = value.find(',', p);
        slacks.push_back(std::stoll(value.substr(p, q - p)));
        p = q == std::string::npos ? value.size() : q + 1;
      }
    } else {
      std::cerr << "unknown option " << flag << "\n";
      return 2;
    }
  }
  try {
    auto vocab = load_vocabulary(argv[2]);
    auto entries = load_corpus(argv[1]);
    std::ofstream out(argv[3]);
    std::vector<structured::Matcher> states;
    std::vector<double> compile_us;
    for (const auto& e : entries) {
      if (!only.empty() && e.id.rfind(only, 0) != 0) continue;
      std::shared_ptr<const structured::Grammar> grammar;
      auto t0 = Clock::now();
      try {
        grammar = structured::Grammar::parse(grammar_text(e));
      } catch (const structured::ConstraintError& err) {
        out << json{{"id", e.id}, {"error", err.what()}, {"path", err.path()}}.dump() << "\n";
        continue;
      }
      double us = micros_since(t0);
      compile_us.push_back(us);
      for (int64_t slack : slacks) {
        for (int s = 0; s < seeds; ++s) {
          uint32_t seed = static_cast<uint32_t>(s * 1000 + slack);
          json line = walk(grammar, vocab, slack, seed, bench_batch > 0 ? &states : nullptr);
          line["id"] = e.id;
          line["seed"] = seed;
          line["slack"] = slack;
          line["compile_us"] = us;
          out << line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
        }
      }
    }
    if (bench_batch > 0) {
      json b = bench(states, bench_batch);
      b["compile_median_us"] = median(compile_us);
      b["compile_max_us"] = compile_us.empty() ? 0 : *std::max_element(compile_us.begin(), compile_us.end());
      b["compiled"] = compile_us.size();
      std::cout << json{{"bench", b}}.dump() << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "structured_corpus_walk: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
