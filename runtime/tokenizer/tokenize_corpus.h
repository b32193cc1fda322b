// Documents → .npy token files (the layout OLMo-core's numpy datasets read).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

struct TokenizeOptions {
  std::string output_dir;  ///< created if missing
  int32_t eos_id = 100257; ///< appended after every document (dolma2 <|endoftext|>)
  int threads = 1;         ///< input files tokenized in parallel
};

struct TokenizeStats {
  int64_t documents = 0;
  int64_t tokens = 0;        ///< including one EOS per document
  int64_t bytes = 0;         ///< of document text
  std::vector<std::string> outputs;  ///< one .npy per input, in input order
};

/// Tokenizes every input into `output_dir/<index>-<input name>.npy` (uint32, 1-D):
/// each document's ids followed by `eos_id`; no BOS. An input whose name ends in
/// .jsonl, .json, .jsonl.gz or .json.gz holds one JSON object per line with a string
/// "text" field (Dolma style); any other file is one plain-text document. gzip is
/// detected and decompressed (zlib). `progress`, if set, is called from time to time
/// with the running totals (thread-safe). Throws InputError naming the file (and line)
/// for a missing or unreadable input (truncated gzip included), a line that is not JSON
/// or has no string "text"; an output is written under a temporary name and renamed
/// when complete, and a failed run removes every output it wrote. Empty documents are
/// skipped.
TokenizeStats tokenize_corpus(const Tokenizer& tokenizer, const std::vector<std::string>& inputs,
                              const TokenizeOptions& options,
                              const std::function<void(const TokenizeStats&)>& progress = {});

}  // namespace olmo2
