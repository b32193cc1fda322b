#include "parallel/placement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <sstream>

#include "core/error.h"
#include "ops/threads.h"
#include "parallel/agreement.h"
#include "parallel/node_ranks.h"
#include "parallel/string_gather.h"

namespace olmo2::parallel {

namespace {


std::string plural(int n, const char* one) { return std::to_string(n) + " " + one + (n == 1 ? "" : "s"); }

/// "OMP_NUM_THREADS", or "the affinity mask (2 CPUs ÷ 4 ranks)".
std::string source_text(const RankPlace& p) {
  std::string s = to_string(p.source);
  if (p.source == ThreadSource::affinity) {
    s += " (" + plural(p.affinity_cpus, "CPU") + " ÷ " + plural(p.ranks_sharing_mask, "rank") + ")";
  }
  return s;
}

std::string coords_text(const Coords& c) {
  return "(tp " + std::to_string(c.tp) + ", pp " + std::to_string(c.pp) + ", dp " + std::to_string(c.dp) +
         (c.cp > 0 ? ", cp " + std::to_string(c.cp) : std::string()) + ")";
}

}  // namespace

std::vector<int> local_ranks(const std::vector<std::string>& hosts) {
  std::map<std::string, int> seen;
  std::vector<int> local;
  local.reserve(hosts.size());
  for (const std::string& h : hosts) local.push_back(seen[h]++);
  return local;
}

std::vector<int> ranks_sharing_mask(const std::vector<std::string>& hosts, const std::vector<uint64_t>& keys) {
  if (hosts.size() != keys.size()) {
    OLMO2_THROW(ShapeError, "ranks_sharing_mask: ", hosts.size(), " hosts but ", keys.size(), " mask keys");
  }
  std::map<std::pair<std::string, uint64_t>, int> count;
  for (size_t r = 0; r < hosts.size(); ++r) ++count[{hosts[r], keys[r]}];
  std::vector<int> sharing;
  sharing.reserve(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) sharing.push_back(count[{hosts[r], keys[r]}]);
  return sharing;
}

std::vector<std::string> describe_placement(const std::vector<RankPlace>& places, const Topology& topology) {
  const int world = topology.world();
  if (static_cast<int>(places.size()) != world) {
    OLMO2_THROW(ShapeError, "describe_placement: ", places.size(), " places for a world of ", world, " ranks");
  }
  // Hosts in the order of their first rank, each with its ranks.
  std::vector<std::pair<std::string, std::vector<int>>> hosts;
  for (int r = 0; r < world; ++r) {
    const std::string& h = places[static_cast<size_t>(r)].host;
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& e) { return e.first == h; });
    if (it == hosts.end()) it = hosts.insert(hosts.end(), {h, {}});
    it->second.push_back(r);
  }
  std::vector<std::string> lines;
  for (const auto& [host, ranks] : hosts) {
    std::ostringstream line;
    line << "placement: host " << host << ":";
    bool same_source = true;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const RankPlace& p = places[static_cast<size_t>(ranks[i])];
      line << (i ? ", " : " ") << "rank " << ranks[i] << " " << coords_text(topology.coords(ranks[i])) << " local "
           << p.local_rank << " threads " << p.threads;
      same_source = same_source && source_text(p) == source_text(places[static_cast<size_t>(ranks[0])]);
    }
    line << "; threads from";
    if (same_source) {
      line << " " << source_text(places[static_cast<size_t>(ranks[0])]);
    } else {
      for (size_t i = 0; i < ranks.size(); ++i) {
        line << (i ? ", rank " : ": rank ") << ranks[i] << " " << source_text(places[static_cast<size_t>(ranks[i])]);
      }
    }
    lines.push_back(line.str());
  }
  if (topology.layout().tp > 1) {
    for (int r = 0; r < world; ++r) {
      if (topology.coords(r).tp != 0) continue;
      std::vector<std::string> spanned;
      std::ostringstream members;
      for (int m : topology.tp_group(r)) {
        const std::string& h = places[static_cast<size_t>(m)].host;
        members << (m == r ? "" : ",") << m;
        if (std::find(spanned.begin(), spanned.end(), h) == spanned.end()) spanned.push_back(h);
      }
      if (spanned.size() < 2) continue;
      std::ostringstream w;
      w << "olmo2: warning: TP group {" << members.str() << "} spans nodes ";
      for (size_t i = 0; i < spanned.size(); ++i) w << (i ? ", " : "") << spanned[i];
      w << ": its all-reduces cross the network every layer; place TP within a node: srun -m block / "
           "--ntasks-per-node";
      lines.push_back(w.str());
    }
  }
  return lines;
}

std::vector<RankPlace> place_ranks(Communicator& world, int flag) {
  std::string host;
  AffinityMask mask;
  std::optional<ThreadChoice> fixed;
  agree(&world, [&] {  // a bad setting or failing call on one rank stops every rank
    host = host_name();
    mask = affinity_mask();
    fixed = threads_from_settings(thread_settings_from_environment(flag));
  });
  const size_t n = static_cast<size_t>(world.size());
  const std::vector<std::string> hosts = all_gather_strings(world, host);
  const uint64_t my_mask[2] = {mask.key, static_cast<uint64_t>(mask.cpus)};
  std::vector<uint64_t> all_masks(2 * n);
  world.all_gather(std::span<const uint64_t>(my_mask, 2), all_masks);

  std::vector<uint64_t> keys(n);
  for (size_t r = 0; r < n; ++r) keys[r] = all_masks[2 * r];
  const std::vector<int> local = local_ranks(hosts);
  const std::vector<int> sharing = ranks_sharing_mask(hosts, keys);
  const size_t me = static_cast<size_t>(world.rank());
  const ThreadChoice choice =
      fixed ? *fixed : ThreadChoice{threads_from_affinity(mask.cpus, sharing[me]), ThreadSource::affinity};
  set_num_threads(choice.threads);

  const int32_t mine[2] = {num_threads(), static_cast<int32_t>(choice.source)};  // the count as set
  std::vector<int32_t> all(2 * n);
  world.all_gather(std::span<const int32_t>(mine, 2), all);
  std::vector<RankPlace> places(n);
  for (size_t r = 0; r < n; ++r) {
    places[r] = RankPlace{hosts[r], local[r], all[2 * r], static_cast<ThreadSource>(all[2 * r + 1]),
                          static_cast<int>(all_masks[2 * r + 1]), sharing[r]};
  }
  return places;
}

RankPlace place_single_process(int flag) {
  const int cpus = affinity_mask().cpus;
  const ThreadChoice choice = choose_threads(thread_settings_from_environment(flag), cpus, 1);
  set_num_threads(choice.threads);
  return RankPlace{host_name(), 0, choice.threads, choice.source, cpus, 1};
}

}  // namespace olmo2::parallel
