// Placement: which host each rank runs on, its local rank there and its CPU threads; the
// per-node map rank 0 prints at start and the warning for a TP group that spans nodes
// (docs/architecture.md §7 "Placement").
#pragma once

#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/thread_count.h"
#include "parallel/topology.h"

namespace olmo2::parallel {

/// Where one world rank runs.
struct RankPlace {
  std::string host;      ///< gethostname of the rank
  int local_rank = 0;    ///< index among the ranks of `host`, in world-rank order
  int threads = 1;       ///< CPU threads the rank uses (the OpenMP count it set)
  ThreadSource source = ThreadSource::affinity;  ///< where `threads` came from
  int affinity_cpus = 1;       ///< CPUs in its affinity mask
  int ranks_sharing_mask = 1;  ///< ranks of `host` with that same mask, itself included
  bool operator==(const RankPlace&) const = default;
};

/// For every rank (index = world rank), its index among the ranks whose `hosts` entry is
/// the same string, in rank order: {"a","b","a","b"} → {0,0,1,1}.
std::vector<int> local_ranks(const std::vector<std::string>& hosts);

/// For every rank, how many ranks have both its host and its mask key (itself included):
/// hosts {"a","a","b"}, keys {7,7,7} → {2,2,1}. ShapeError when the sizes differ.
std::vector<int> ranks_sharing_mask(const std::vector<std::string>& hosts, const std::vector<uint64_t>& keys);

/// The lines rank 0 prints (without newlines): one per host, in the order of its first
/// rank, then one warning per TP group whose ranks are on more than one host.
///   placement: host a: rank 0 (tp 0, pp 0, dp 0) local 0 threads 4, rank 1 (tp 1, pp 0, dp 0) local 1 threads 4; threads from OMP_NUM_THREADS
///   olmo2: warning: TP group {0,1} spans nodes a, b: its all-reduces cross the network every layer; place TP within a node: srun -m block / --ntasks-per-node
/// The source ends the host's line once when all its ranks agree on it, else it is named
/// per rank; the affinity source adds "(C CPUs ÷ R ranks)". ShapeError when
/// places.size() ≠ topology.world().
std::vector<std::string> describe_placement(const std::vector<RankPlace>& places, const Topology& topology);

/// Places this rank, collectively over `world` (every rank calls it): reads its host
/// name, affinity mask and thread settings (`flag` = --threads, 0 when not given, and the
/// environment; thread_count.h), all-gathers the host names and masks, sets its thread
/// count (set_num_threads: OpenMP, OpenBLAS) by choose_threads, and all-gathers the
/// counts as set. Returns every rank's place (index = world rank). An invalid setting or
/// a failing system call on any rank makes every rank throw AgreedError naming it (no
/// rank is left waiting). CollectiveTimeout if a peer never arrives.
std::vector<RankPlace> place_ranks(Communicator& world, int flag);

/// The one-process form: sets this process's thread count by choose_threads (affinity
/// mask ÷ 1) and returns its place (host, local rank 0, the count and its source), which
/// describe_placement describes as for a world of one. InputError for an invalid setting.
RankPlace place_single_process(int flag);

}  // namespace olmo2::parallel
