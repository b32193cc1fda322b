// The files of named activations (docs/architecture.md §12, §13): `olmo2 trace
// --prompts FILE` (one JSON object a line) and the output files of trace and generate.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/model/config.h"

namespace olmo2 {

/// Reads `path`: JSON Lines, each line {"prompt": "text"} (encoded with the tokenizer at
/// `tokenizer`, loaded at the first text prompt; no BOS added, as generate --prompt) or
/// {"prompt_ids": [ids]}; blank lines are skipped but counted. Returns the prompts' token
/// ids in file order. Throws InputError naming the file, the line number (from 1) and the
/// field: a file that cannot be read or holds no prompt, a line that is not a JSON object,
/// neither or both fields, a prompt that is not a string or is empty, ids that are not
/// integers or lie outside [0, vocab_size), a prompt longer than max_position_embeddings,
/// a text prompt without a tokenizer file.
std::vector<std::vector<int32_t>> read_trace_prompts(const std::string& path, const std::string& tokenizer,
                                                     const ModelConfig& config);

/// Opens `path` for writing (created or truncated) for `option` ("--output"). Throws
/// InputError naming the option and the path when it cannot be.
std::ofstream open_output_file(const std::string& path, const std::string& option);

}  // namespace olmo2
