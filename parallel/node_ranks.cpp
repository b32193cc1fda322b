#include "parallel/node_ranks.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "core/hash.h"
#include "parallel/agreement.h"

namespace olmo2::parallel {

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) {
    OLMO2_THROW(Error, "gethostname failed: ", std::strerror(errno));
  }
  return host;
}

std::vector<int> ranks_sharing_host(Communicator& world, std::string_view host) {
  const uint64_t mine = fnv1a64(host);
  std::vector<uint64_t> all(static_cast<size_t>(world.size()));
  world.all_gather(std::span<const uint64_t>(&mine, 1), all);
  std::vector<int> ranks;
  for (int r = 0; r < world.size(); ++r) {
    if (all[static_cast<size_t>(r)] == mine) ranks.push_back(r);
  }
  return ranks;
}

std::vector<int> node_ranks(Communicator* world) {
  if (!world) return {0};
  std::string host;
  agree(world, [&] { host = host_name(); });  // a failure on one rank stops them all
  return ranks_sharing_host(*world, host);
}

}  // namespace olmo2::parallel
