#include "launcher/placement_log.h"

#include <sstream>

#include "parallel/placement.h"

namespace olmo2 {

void place_and_log(parallel::Communicator& world, const parallel::Topology& topology, int threads_flag,
                   std::ostream& log) {
  const std::vector<parallel::RankPlace> places = parallel::place_ranks(world, threads_flag);
  if (world.rank() != 0) return;
  std::ostringstream text;  // written at once, so that other output does not split it
  for (const std::string& line : parallel::describe_placement(places, topology)) text << line << "\n";
  log << text.str() << std::flush;
}

std::string place_single_process(int threads_flag) {
  const parallel::RankPlace p = parallel::place_single_process(threads_flag);
  std::string text = "1 process on " + p.host + ", " + std::to_string(p.threads) +
                     (p.threads == 1 ? " thread" : " threads") + " from " + parallel::to_string(p.source);
  if (p.source == parallel::ThreadSource::affinity) {
    text += " (" + std::to_string(p.affinity_cpus) + (p.affinity_cpus == 1 ? " CPU)" : " CPUs)");
  }
  return text;
}

}  // namespace olmo2
