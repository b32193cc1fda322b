#include "parallel/agreement.h"

#include <cstdint>
#include <exception>
#include <vector>

namespace olmo2::parallel {

void agree(Communicator* world, const std::function<void()>& fn) {
  if (!world) {
    fn();
    return;
  }
  std::string message;
  bool failed = false;
  try {
    fn();
  } catch (const std::exception& e) {
    failed = true;
    message = e.what();
  }
  // One i32 flag per rank, summed: who failed.
  std::vector<int32_t> flags(static_cast<size_t>(world->size()), 0);
  flags[static_cast<size_t>(world->rank())] = failed ? 1 : 0;
  world->all_reduce_sum(flags);
  int root = -1, count = 0;
  for (int r = 0; r < world->size(); ++r) {
    if (flags[static_cast<size_t>(r)] == 0) continue;
    if (root < 0) root = r;
    ++count;
  }
  if (root < 0) return;
  broadcast_string(*world, message, root);
  if (count < world->size()) {
    message = "rank " + std::to_string(root) +
              (count > 1 ? " (and " + std::to_string(count - 1) + " other ranks)" : std::string()) + ": " + message;
  }
  OLMO2_THROW(AgreedError, message);
}

bool any_rank(Communicator* world, bool flag) {
  if (!world || world->size() == 1) return flag;
  int32_t f = flag ? 1 : 0;
  world->all_reduce_max(std::span<int32_t>(&f, 1));
  return f != 0;
}

void broadcast_string(Communicator& comm, std::string& text, int root) {
  int64_t size = static_cast<int64_t>(text.size());
  comm.broadcast(std::span<int64_t>(&size, 1), root);
  text.resize(static_cast<size_t>(size));
  if (size > 0) comm.broadcast(std::as_writable_bytes(std::span<char>(text.data(), text.size())), root);
}

}  // namespace olmo2::parallel
