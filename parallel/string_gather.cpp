#include "parallel/string_gather.h"

#include <algorithm>
#include <cstdint>
#include <span>

namespace olmo2::parallel {

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine) {
  const size_t n = static_cast<size_t>(comm.size());
  const int64_t length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(n);
  comm.all_gather(std::span<const int64_t>(&length, 1), lengths);
  const size_t width = static_cast<size_t>(std::max<int64_t>(1, *std::max_element(lengths.begin(), lengths.end())));
  std::vector<uint8_t> padded(width, 0), all(width * n);
  std::copy(mine.begin(), mine.end(), padded.begin());
  comm.all_gather(std::span<const uint8_t>(padded), all);
  std::vector<std::string> out(n);
  for (size_t r = 0; r < n; ++r) {
    out[r].assign(reinterpret_cast<const char*>(all.data()) + r * width, static_cast<size_t>(lengths[r]));
  }
  return out;
}

}  // namespace olmo2::parallel
