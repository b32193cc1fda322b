#include "runtime/serve/api/response_id.h"

#include <cstdint>
#include <random>

namespace olmo2 {

std::string make_response_id(std::string_view prefix) {
  // Each thread's generator gets 256 bits of seed from random_device.
  thread_local std::mt19937_64 generator = [] {
    std::random_device device;
    std::seed_seq seq{device(), device(), device(), device(), device(), device(), device(), device()};
    return std::mt19937_64(seq);
  }();
  static const char* hex = "0123456789abcdef";
  std::string id(prefix);
  for (int word = 0; word < 2; ++word) {
    uint64_t bits = generator();
    for (int k = 0; k < 16; ++k, bits >>= 4) id.push_back(hex[bits & 15]);
  }
  return id;
}

}  // namespace olmo2
