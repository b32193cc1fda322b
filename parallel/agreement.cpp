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
  // max of (size − rank) over failing ranks picks the lowest failing rank.
  float code = failed ? static_cast<float>(world->size() - world->rank()) : 0.0f;
  world->all_reduce_max(std::span<float>(&code, 1));
  if (code == 0.0f) return;
  const int root = world->size() - static_cast<int>(code);
  broadcast_string(*world, message, root);
  if (world->size() > 1) message = "rank " + std::to_string(root) + ": " + message;
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
