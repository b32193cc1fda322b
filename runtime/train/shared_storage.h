// The start-up check that every rank sees the same --save-dir and, on a resume, the same
// checkpoint, so that a save directory local to one node is refused before any work
// instead of failing later on other ranks (docs/architecture.md §7 "Shared storage").
#pragma once

#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace olmo2 {

/// What one rank saw of rank 0's save directory: "" when all was well, else why not.
struct StorageSight {
  int rank = 0;
  std::string host;        ///< gethostname() of that rank
  std::string probe;       ///< reading rank 0's probe file failed: the reason
  std::string checkpoint;  ///< the resume checkpoint differs or cannot be read: the reason
};

/// The one error message for every rank's sight ("" when every rank saw both): ranks are
/// grouped by host, e.g. "ranks 2, 3 on nodeb do not see --save-dir /x (it is not shared
/// storage): rank 2: cannot open /x/.olmo2-probe-…: No such file or directory"; ranks that
/// see the probe but another `resume_dir`/training_state.json follow in a second clause.
/// Pure; throws nothing.
std::string storage_failure_message(const std::vector<StorageSight>& sights, const std::string& save_dir,
                                    const std::string& resume_dir);

/// Checks, collectively over `world`, that every rank sees rank 0's `save_dir` and (when
/// `resume_dir` is not empty) the same resume_dir/training_state.json. Rank 0 creates
/// `save_dir` and writes `.olmo2-probe-<32 random hex digits>` there holding the token;
/// every rank reads it back and, on a resume, compares the XXH3-128 of
/// training_state.json (runtime/io/file_checksum.h) with rank 0's; every rank's
/// StorageSight goes to rank 0, which removes the probe and the directories it created.
/// A no-op with an empty `save_dir`; with `world` null or of one rank only the probe is
/// written and removed, so an unwritable --save-dir is refused before the first step
/// rather than at the first save. Throws
/// parallel::AgreedError on every rank alike: rank 0 cannot create `save_dir` or write
/// the probe (the OS reason), or storage_failure_message is not empty.
/// CollectiveTimeout if a peer never arrives.
void check_shared_storage(parallel::Communicator* world, const std::string& save_dir, const std::string& resume_dir);

}  // namespace olmo2
