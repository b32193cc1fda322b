#include "runtime/tokenizer/tokenize_corpus.h"

#include <zlib.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/io/npy.h"

namespace olmo2 {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Whole content of a file, gunzipped if it is gzip (zlib reads plain files as is).
std::string read_all(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) OLMO2_THROW(InputError, "input ", path, " does not exist or is not a file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) OLMO2_THROW(InputError, "cannot open input ", path);
  gzbuffer(f, 1 << 20);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  const std::string what = msg ? msg : "";
  gzclose(f);
  if (n < 0 || err == Z_BUF_ERROR) {
    OLMO2_THROW(InputError, "cannot read input ", err == Z_BUF_ERROR ? path + ": truncated gzip data" : what);
  }
  if (err != Z_OK) OLMO2_THROW(InputError, "cannot read input ", what);
  return out;
}

bool is_jsonl(const std::string& path) {
  for (const char* s : {".jsonl", ".json", ".jsonl.gz", ".json.gz"}) {
    if (ends_with(path, s)) return true;
  }
  return false;
}

}  // namespace

TokenizeStats tokenize_corpus(const Tokenizer& tokenizer, const std::vector<std::string>& inputs,
                              const TokenizeOptions& options,
                              const std::function<void(const TokenizeStats&)>& progress) {
  if (inputs.empty()) OLMO2_THROW(InputError, "no input files given");
  if (options.threads < 1) OLMO2_THROW(InputError, "thread count must be at least 1, got ", options.threads);
  if (options.eos_id < 0 || options.eos_id >= tokenizer.vocab_size()) {
    OLMO2_THROW(InputError, "eos id ", options.eos_id, " is outside the tokenizer vocabulary");
  }
  for (const std::string& in : inputs) {  // fail before any work
    if (!std::filesystem::is_regular_file(in)) OLMO2_THROW(InputError, "input ", in, " does not exist or is not a file");
  }
  std::filesystem::create_directories(options.output_dir);

  TokenizeStats total;
  for (size_t i = 0; i < inputs.size(); ++i) {
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "%05zu-", i);
    std::string name = std::filesystem::path(inputs[i]).filename().string();
    for (const char* s : {".gz", ".jsonl", ".json", ".txt"}) {
      if (ends_with(name, s)) name.resize(name.size() - std::strlen(s));
    }
    total.outputs.push_back((std::filesystem::path(options.output_dir) / (prefix + name + ".npy")).string());
  }

  std::mutex mu;
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  auto worker = [&] {
    while (true) {
      const size_t i = next++;
      if (i >= inputs.size()) return;
      try {
        const std::string path = inputs[i];
        const std::string content = read_all(path);
        NpyWriter writer(total.outputs[i]);
        TokenizeStats local;
        std::vector<uint32_t> ids32;
        auto add_document = [&](std::string_view text) {
          if (text.empty()) return;  // an empty document adds no tokens, not even EOS
          const std::vector<int32_t> ids = tokenizer.encode(text);
          ids32.assign(ids.begin(), ids.end());
          ids32.push_back(static_cast<uint32_t>(options.eos_id));
          writer.append(ids32);
          local.documents += 1, local.tokens += static_cast<int64_t>(ids32.size());
          local.bytes += static_cast<int64_t>(text.size());
          if (local.documents % 256 == 0) {
            std::lock_guard<std::mutex> lock(mu);
            total.documents += local.documents, total.tokens += local.tokens, total.bytes += local.bytes;
            local = {};
            if (progress) progress(total);
          }
        };
        if (is_jsonl(path)) {
          size_t start = 0;
          for (int64_t line = 1; start < content.size(); ++line) {
            size_t end = content.find('\n', start);
            if (end == std::string::npos) end = content.size();
            const std::string_view l = std::string_view(content).substr(start, end - start);
            start = end + 1;
            if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
            nlohmann::json j;
            try {
              j = nlohmann::json::parse(l);
            } catch (const nlohmann::json::exception& e) {
              OLMO2_THROW(InputError, path, ":", line, ": not valid JSON (", e.what(), ")");
            }
            if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
              OLMO2_THROW(InputError, path, ":", line, ": no string \"text\" field");
            }
            add_document(j["text"].get_ref<const std::string&>());
          }
        } else {
          add_document(content);
        }
        writer.close();
        std::lock_guard<std::mutex> lock(mu);
        total.documents += local.documents, total.tokens += local.tokens, total.bytes += local.bytes;
        if (progress) progress(total);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
        next = inputs.size();  // stop handing out work
      }
    }
  };
  std::vector<std::thread> pool;
  const int n = std::min<int>(options.threads, static_cast<int>(inputs.size()));
  for (int t = 0; t < n; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (failure) {  // a failed run publishes nothing
    for (const std::string& out : total.outputs) std::filesystem::remove(out);
    std::rethrow_exception(failure);
  }
  return total;
}

}  // namespace olmo2
