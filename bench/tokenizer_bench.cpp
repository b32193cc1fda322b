// Tokenizer throughput (MB/s of UTF-8 text) on a JSONL corpus, 1 thread and all
// threads, beside the `tokenizers` library's on the same text and thread counts
// (run through bench/tokenizers_throughput.py in the same run). Not a test.
//
//   olmo2_tokenizer_bench [--tokenizer data/dolma2-tokenizer.json] [--corpus data/fortunes.jsonl]
//                         [--python /opt/olmo2-fixtures-venv/bin/python] [--repeats 3]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"

namespace {

struct Result {
  double mb_per_s;
  int64_t tokens;
};

Result encode_all(const olmo2::Tokenizer& tok, const std::vector<std::string>& docs, int threads,
                  int repeats, size_t bytes) {
  double best = 1e30;
  int64_t tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    std::atomic<size_t> next{0};
    std::atomic<int64_t> count{0};
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        int64_t local = 0;
        for (size_t i; (i = next.fetch_add(64)) < docs.size();) {
          for (size_t j = i; j < std::min(docs.size(), i + 64); ++j) local += static_cast<int64_t>(tok.encode(docs[j]).size());
        }
        count += local;
      });
    }
    for (auto& t : pool) t.join();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    tokens = count;
  }
  return {static_cast<double>(bytes) / 1e6 / best, tokens};
}

std::string run(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    if (pclose(p) != 0) return "";
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_path = "data/dolma2-tokenizer.json", corpus = "data/fortunes.jsonl",
              python = "/opt/olmo2-fixtures-venv/bin/python";
  int repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tokenizer") tok_path = v;
    else if (k == "--corpus") corpus = v;
    else if (k == "--python") python = v;
    else if (k == "--repeats") repeats = std::stoi(v);
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  try {
    const olmo2::Tokenizer tok = olmo2::Tokenizer::from_file(tok_path);
    std::vector<std::string> docs;
    size_t bytes = 0;
    std::ifstream in(corpus);
    if (!in) throw std::runtime_error("cannot open corpus " + corpus);
    for (std::string line; std::getline(in, line);) {
      docs.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
      bytes += docs.back().size();
    }
    const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::printf("corpus %s: %zu documents, %.2f MB\n", corpus.c_str(), docs.size(), bytes / 1e6);
    std::printf("%-8s %14s %16s %8s %10s\n", "threads", "olmo2 MB/s", "tokenizers MB/s", "ratio", "tokens");
    for (int threads : {1, all}) {
      const Result ours = encode_all(tok, docs, threads, repeats, bytes);
      const std::string script = std::string(OLMO2_SOURCE_DIR) + "/bench/tokenizers_throughput.py";
      const std::string out = run(python + " " + script + " " + tok_path + " " + corpus + " " +
                                  std::to_string(threads) + " " + std::to_string(repeats) + " 2>/dev/null");
      if (out.empty()) {
        std::printf("%-8d %14.2f %16s %8s %10lld\n", threads, ours.mb_per_s, "(unavailable)", "-",
                    static_cast<long long>(ours.tokens));
        continue;
      }
      const auto ref = nlohmann::json::parse(out);
      const double theirs = ref["mb_per_s"].get<double>();
      std::printf("%-8d %14.2f %16.2f %8.2f %10lld%s\n", threads, ours.mb_per_s, theirs, ours.mb_per_s / theirs,
                  static_cast<long long>(ours.tokens),
                  ref["tokens"].get<int64_t>() == ours.tokens ? "" : "  (token counts differ!)");
    }
  } catch (const std::exception& e) {
    std::cerr << "olmo2_tokenizer_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
