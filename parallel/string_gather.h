// All-gather of one variable-length string per rank, for start-up exchanges of small
// text (host names, JSON reports) over the host-span collectives (docs/architecture.md §6).
#pragma once

#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace olmo2::parallel {

/// Every rank's `mine`, in rank order, on every rank: an all-gather of the lengths
/// (int64), then of the strings padded to the longest. Any bytes, NULs included.
/// Collective over `comm`: every rank must call it. CollectiveTimeout (through the
/// communicator) if a peer never arrives.
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine);

}  // namespace olmo2::parallel
