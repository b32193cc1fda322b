// The SHA-256 of a file, as `sha256sum` prints it: how tokenize.json names the tokenizer
// a corpus was tokenized with (docs/architecture.md §7 "Token data and its EOS").
#pragma once

#include <string>

namespace olmo2 {

/// SHA-256 (FIPS 180-4, libcrypto's EVP digest) of the file at `path`, read in 1 MiB
/// chunks, as 64 lowercase hex digits. Throws InputError naming the file and the OS
/// reason when it cannot be opened or read.
std::string sha256_file(const std::string& path);

}  // namespace olmo2
