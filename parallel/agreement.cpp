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
  // One flag per rank, summed: who failed.
  std::vector<float> flags(static_cast<size_t>(world->size()), 0.0f);
  flags[static_cast<size_t>(world->rank())] = failed ? 1.0f : 0.0f;
  world->all_reduce_sum(flags);
  int root = -1, count = 0;
  for (int r = 0; r < world->size(); ++r) {
    if (flags[static_cast<size_t>(r)] == 0.0f) continue;
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
  float f = flag ? 1.0f : 0.0f;
  world->all_reduce_max(std::span<float>(&f, 1));
  return f != 0.0f;
}

void broadcast_string(Communicator& comm, std::string& text, int root) {
  uint64_t size = text.size();
  comm.broadcast(std::as_writable_bytes(std::span<uint64_t>(&size, 1)), root);
  text.resize(size);
  if (size > 0) comm.broadcast(std::as_writable_bytes(std::span<char>(text.data(), text.size())), root);
}

}  // namespace olmo2::parallel
