// `olmo2 tokenize`: documents → .npy token files that numpy reads, --ids, and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/io/npy.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using test::run_olmo2;

std::string tokenizer_path() {
  const std::string fetched = test::source_path("data/dolma2-tokenizer.json");
  return std::filesystem::exists(fetched) ? fetched : test::source_path("../shared/data/dolma2-tokenizer.json");
}

std::vector<uint32_t> read_npy(const std::string& path) {
  NpyFile f(path);
  std::vector<uint32_t> out(f.size());
  f.read(0, out);
  return out;
}

std::vector<uint32_t> expected_tokens(const Tokenizer& tok, const std::vector<std::string>& docs) {
  std::vector<uint32_t> out;
  for (const std::string& d : docs) {
    for (int32_t id : tok.encode(d)) out.push_back(static_cast<uint32_t>(id));
    out.push_back(100257);  // EOS after every document, no BOS
  }
  return out;
}

TEST(CliTokenize, IdsModeReadsStdin) {
  test::TempDir dir;
  std::ofstream(dir.file("in.txt")) << "Hello!";
  const auto r = run_olmo2("tokenize --tokenizer " + tokenizer_path() + " --ids < " + dir.file("in.txt"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[9906,0]\n");
}

TEST(CliTokenize, TextJsonlAndGzipInputsBecomeEosJoinedNpyFiles) {
  const Tokenizer tok = Tokenizer::from_file(tokenizer_path());
  test::TempDir dir;
  const std::vector<std::string> jsonl_docs = {"First document.\n", "Zweites Dokument — mit Umlauten: äöü.", "第三"};
  {
    std::ofstream f(dir.file("docs.jsonl"));
    for (const auto& d : jsonl_docs) f << nlohmann::json{{"id", 1}, {"text", d}}.dump() << "\n";
    f << "\n";  // blank lines are skipped
  }
  const std::string plain = "A plain text file is one document.\n\nEven with blank lines.";
  std::ofstream(dir.file("book.txt")) << plain;
  const std::vector<std::string> gz_docs = {"compressed one", "compressed two <|endoftext|> inside"};
  {
    gzFile g = gzopen(dir.file("more.jsonl.gz").c_str(), "wb");
    for (const auto& d : gz_docs) {
      const std::string line = nlohmann::json{{"text", d}}.dump() + "\n";
      gzwrite(g, line.data(), static_cast<unsigned>(line.size()));
    }
    gzclose(g);
  }
  const auto r = run_olmo2("tokenize --tokenizer " + tokenizer_path() + " --output " + dir.file("out") + " --threads 2 " +
                           dir.file("docs.jsonl") + " " + dir.file("book.txt") + " " + dir.file("more.jsonl.gz"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("tokenized 6 documents"));
  EXPECT_EQ(read_npy(dir.file("out/00000-docs.npy")), expected_tokens(tok, jsonl_docs));
  EXPECT_EQ(read_npy(dir.file("out/00001-book.npy")), expected_tokens(tok, {plain}));
  EXPECT_EQ(read_npy(dir.file("out/00002-more.npy")), expected_tokens(tok, gz_docs));
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/00000-docs.npy.tmp")));
}

TEST(CliTokenize, NumpyReadsTheOutput) {
  std::string python;
  for (const char* py : {"/usr/bin/python3", "/opt/olmo2-fixtures-venv/bin/python", "python3"}) {
    if (std::system((std::string(py) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) {
      python = py;
      break;
    }
  }
  if (python.empty()) GTEST_SKIP() << "no python with numpy (apt-get install python3-numpy); numpy round trip not checked";
  test::TempDir dir;
  std::ofstream(dir.file("a.txt")) << "numpy must read this file back exactly.";
  ASSERT_EQ(run_olmo2("tokenize --tokenizer " + tokenizer_path() + " --output " + dir.path() + " " + dir.file("a.txt")).status, 0);
  const auto ids = read_npy(dir.file("00000-a.npy"));
  uint64_t sum = 0;
  for (uint32_t v : ids) sum += v;
  const std::string cmd = python + " " + test::source_path("tests/io/npy_check.py") + " check " + dir.file("00000-a.npy") +
                          " " + std::to_string(ids.size()) + " " + std::to_string(sum) + " 0=" + std::to_string(ids[0]) + " " +
                          std::to_string(ids.size() - 1) + "=100257";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(CliTokenize, BadInputsAreNamed) {
  test::TempDir dir;
  const std::string t = " --tokenizer " + tokenizer_path() + " --output " + dir.file("out") + " ";
  auto r = run_olmo2("tokenize" + t + dir.file("missing.txt"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("missing.txt does not exist"));
  std::ofstream(dir.file("bad.jsonl")) << "{\"text\": \"ok\"}\n{broken\n";
  r = run_olmo2("tokenize" + t + dir.file("bad.jsonl"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("bad.jsonl:2: not valid JSON"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/00000-bad.npy"))) << "no partial output";
  // A good input before a bad one: the failed run publishes neither.
  std::ofstream(dir.file("good.txt")) << "fine";
  r = run_olmo2("tokenize" + t + dir.file("good.txt") + " " + dir.file("bad.jsonl"));
  EXPECT_EQ(r.status, 1);
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/00000-good.npy")));
  // A gzip stream cut short is named as such.
  {
    gzFile g = gzopen(dir.file("full.jsonl.gz").c_str(), "wb");
    const std::string line = std::string("{\"text\": \"") + std::string(5000, 'x') + "\"}\n";
    gzwrite(g, line.data(), static_cast<unsigned>(line.size()));
    gzclose(g);
    std::ifstream in(dir.file("full.jsonl.gz"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir.file("cut.jsonl.gz"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  r = run_olmo2("tokenize" + t + dir.file("cut.jsonl.gz"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("truncated gzip data"));
  std::ofstream(dir.file("notext.jsonl")) << "{\"body\": \"x\"}\n";
  r = run_olmo2("tokenize" + t + dir.file("notext.jsonl"));
  EXPECT_THAT(r.err, HasSubstr("notext.jsonl:1: no string \"text\" field"));
  r = run_olmo2("tokenize --tokenizer " + tokenizer_path() + " " + dir.file("notext.jsonl"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--output DIR is required"));
  r = run_olmo2("tokenize --tokenizer " + dir.file("nope.json") + " --ids < /dev/null");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot open tokenizer file"));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The EOS appended is the tokenizer's own, recorded in tokenize.json with the tokenizer's
// path and SHA-256 (sha256sum's digest of the same file).
TEST(CliTokenizeEos, TheTokenizersEosIsAppendedAndRecorded) {
  test::TempDir dir;
  std::ofstream(dir.file("a.txt")) << "One document.";
  const auto r = run_olmo2("tokenize --tokenizer " + tokenizer_path() + " --output " + dir.file("out") + " " +
                           dir.file("a.txt"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("each document ended by <|endoftext|> (id 100257)"));
  EXPECT_EQ(read_npy(dir.file("out/00000-a.npy")).back(), 100257u);
  const nlohmann::json m = nlohmann::json::parse(slurp(dir.file("out/tokenize.json")));
  EXPECT_EQ(m["eos_id"], 100257);
  EXPECT_EQ(m["eos_token"], "<|endoftext|>");
  EXPECT_EQ(m["tokenizer"], tokenizer_path());
  const std::string sha = dir.file("sha");
  ASSERT_EQ(std::system(("sha256sum " + tokenizer_path() + " | cut -c1-64 > " + sha).c_str()), 0);
  EXPECT_EQ(m["tokenizer_sha256"].get<std::string>() + "\n", slurp(sha));
  EXPECT_EQ(m.size(), 4u);
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/tokenize.json.tmp")));
}

// A tokenizer whose tokenizer_config.json names another EOS (an instruct model's
// end-of-turn token) appends that one.
TEST(CliTokenizeEos, TheTokenizerConfigBesideTheTokenizerDecides) {
  test::TempDir dir;
  std::filesystem::create_directory(dir.file("tok"));
  std::filesystem::copy_file(tokenizer_path(), dir.file("tok/tokenizer.json"));
  std::ofstream(dir.file("tok/tokenizer_config.json")) << R"({"eos_token": "<|im_end|>", "pad_token": "<|pad|>"})";
  std::ofstream(dir.file("a.txt")) << "Hello!";
  const auto r = run_olmo2("tokenize --tokenizer " + dir.file("tok/tokenizer.json") + " --output " + dir.file("out") +
                           " " + dir.file("a.txt"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_npy(dir.file("out/00000-a.npy")), (std::vector<uint32_t>{9906, 0, 100265}));
  const nlohmann::json m = nlohmann::json::parse(slurp(dir.file("out/tokenize.json")));
  EXPECT_EQ(m["eos_id"], 100265);
  EXPECT_EQ(m["eos_token"], "<|im_end|>");
  // A tokenizer_config.json naming no eos_token and no --eos-id: asked for.
  std::ofstream(dir.file("tok/tokenizer_config.json")) << R"({"eos_token": null})";
  const auto none = run_olmo2("tokenize --tokenizer " + dir.file("tok/tokenizer.json") + " --output " +
                              dir.file("out2") + " " + dir.file("a.txt"));
  EXPECT_EQ(none.status, 2);
  EXPECT_THAT(none.err, HasSubstr("has no end-of-text token (" + dir.file("tok/tokenizer_config.json") +
                                  " names no eos_token): give --eos-id N"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("out2")));
  const auto named = run_olmo2("tokenize --tokenizer " + dir.file("tok/tokenizer.json") + " --output " +
                               dir.file("out2") + " " + dir.file("a.txt") + " --eos-id 100265");
  ASSERT_EQ(named.status, 0) << named.err;
  EXPECT_EQ(read_npy(dir.file("out2/00000-a.npy")), (std::vector<uint32_t>{9906, 0, 100265}));
}

TEST(CliTokenizeEos, AnotherEosIdIsRefusedUnlessAllowed) {
  test::TempDir dir;
  std::ofstream(dir.file("a.txt")) << "Hello!";
  const std::string base =
      "tokenize --tokenizer " + tokenizer_path() + " --output " + dir.file("out") + " " + dir.file("a.txt");
  auto r = run_olmo2(base + " --eos-id 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "olmo2: error: tokenize: --eos-id 0 is \"!\", not the end-of-text token of " + tokenizer_path() +
                       " (<|endoftext|> (id 100257), the added token <|endoftext|>): documents would end with another "
                       "token than the one the model stops on; give --allow-eos-mismatch to append it anyway\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("out"))) << "nothing written";
  r = run_olmo2(base + " --eos-id 100278");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--eos-id 100278 is not a token of " + tokenizer_path() + " (ids 0 to 100277)"));
  r = run_olmo2(base + " --eos-id 100257");  // the tokenizer's own: no question
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("warning")));
  r = run_olmo2("tokenize --tokenizer " + tokenizer_path() + " --output " + dir.file("zero") + " " + dir.file("a.txt") +
                " --eos-id 0 --allow-eos-mismatch");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: --eos-id 0 is \"!\", not the end-of-text token"));
  EXPECT_EQ(read_npy(dir.file("zero/00000-a.npy")), (std::vector<uint32_t>{9906, 0, 0}));
  EXPECT_EQ(nlohmann::json::parse(slurp(dir.file("zero/tokenize.json")))["eos_id"], 0);
  r = run_olmo2("tokenize --tokenizer " + tokenizer_path() + " --ids --eos-id 100257 < " + dir.file("a.txt"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("tokenize --ids appends no end-of-text token"));
}

// A directory tokenized with one EOS does not take files ending documents with another.
TEST(CliTokenizeEos, ADirectoryKeepsItsEos) {
  test::TempDir dir;
  std::ofstream(dir.file("a.txt")) << "first";
  std::ofstream(dir.file("b.txt")) << "second";
  const std::string t = "tokenize --tokenizer " + tokenizer_path() + " --output " + dir.file("out") + " ";
  ASSERT_EQ(run_olmo2(t + dir.file("a.txt")).status, 0);
  const std::string before = slurp(dir.file("out/tokenize.json"));
  ASSERT_EQ(run_olmo2(t + dir.file("b.txt")).status, 0) << "the same EOS may add files";
  EXPECT_EQ(slurp(dir.file("out/tokenize.json")), before);
  // Allowed past the tokenizer check, another EOS is told about the directory's record.
  auto r = run_olmo2(t + dir.file("b.txt") + " --eos-id 100265 --allow-eos-mismatch");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: " + dir.file("out/tokenize.json") + " says its token files end every "
                               "document with <|endoftext|> (id 100257), not <|im_end|> (id 100265)"));
  EXPECT_EQ(nlohmann::json::parse(slurp(dir.file("out/tokenize.json")))["eos_id"], 100265);
  // The directory now records <|im_end|>: the tokenizer's own EOS is refused there.
  r = run_olmo2(t + dir.file("a.txt"));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "olmo2: error: tokenize: " + dir.file("out/tokenize.json") +
                       " says its token files end every document with <|im_end|> (id 100265), not <|endoftext|> "
                       "(id 100257): tokenize into another directory, or give --allow-eos-mismatch\n");
  EXPECT_EQ(read_npy(dir.file("out/00000-b.npy")).back(), 100265u) << "nothing rewritten";
  // A tokenize.json that is not one is named.
  std::ofstream(dir.file("out/tokenize.json")) << R"({"eos_id": "x"})";
  r = run_olmo2(t + dir.file("a.txt"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr(dir.file("out/tokenize.json") + ": \"eos_id\" must be a token id"));
}

}  // namespace
}  // namespace olmo2
