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

void place_single_process(int threads_flag) { parallel::place_single_process(threads_flag); }

}  // namespace olmo2
