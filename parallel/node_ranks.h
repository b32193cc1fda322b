// Which world ranks run on the same host: one endpoint per node for metrics, and any
// other per-node choice (docs/architecture.md §4 (rank layout), §9 (metrics)).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "parallel/communicator.h"

namespace olmo2::parallel {

/// This process's host name (gethostname). Throws Error naming errno when it fails.
std::string host_name();

/// The ranks of `world` whose host name equals `host` on this rank, ascending, this
/// rank included: one all-gather over `world` of a 64-bit FNV-1a hash (core/hash.h
/// fnv1a64) of every rank's `host` (u64, carried as i64 words), compared exactly. Two
/// different names collide with probability 2^-64. Collective over `world`: every rank
/// must call it. CollectiveTimeout if a peer never arrives.
std::vector<int> ranks_sharing_host(Communicator& world, std::string_view host);

/// ranks_sharing_host(*world, host_name()): the world ranks on this rank's host. With
/// `world` null (one process), {0}. Collective over `world` (an agree() on the host
/// names, then the all-gather): when gethostname fails on any rank, every rank throws
/// AgreedError naming it, none is left waiting.
std::vector<int> node_ranks(Communicator* world);

}  // namespace olmo2::parallel
