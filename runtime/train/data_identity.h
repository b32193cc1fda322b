// Which data a run reads, as checkpoints record it and resumes and peer ranks compare it
// (docs/architecture.md §7 "Data"): each --data file's path, token count and the XXH3-128
// of its tokens, in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/train/data_loader.h"

namespace olmo2 {

/// One 64-bit fingerprint of the files' contents in order (paths left out: node-local
/// copies at other paths agree). FNV-1a over each file's token count and checksum.
uint64_t data_fingerprint(const std::vector<DataFileIdentity>& files);

/// How the data `now` differs from `trained` (a checkpoint's), naming the file: another
/// number of files, the same files in another order, or file i another file (its path,
/// token count and checksum against the checkpoint's); "" when they hold the same tokens
/// in the same order (whatever their paths).
std::string data_difference(const std::vector<DataFileIdentity>& trained, const std::vector<DataFileIdentity>& now);

}  // namespace olmo2
