#include "runtime/io/file_checksum.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace olmo2 {

struct Xxh3Stream::State {
  XXH3_state_t* s = nullptr;
};

Xxh3Stream::Xxh3Stream() : state_(std::make_unique<State>()) {
  state_->s = XXH3_createState();
  if (state_->s == nullptr || XXH3_128bits_reset(state_->s) != XXH_OK) OLMO2_THROW(Error, "XXH3 state allocation failed");
}

Xxh3Stream::~Xxh3Stream() { XXH3_freeState(state_->s); }

void Xxh3Stream::update(const void* data, size_t n) {
  if (n == 0) return;
  if (XXH3_128bits_update(state_->s, data, n) != XXH_OK) OLMO2_THROW(Error, "XXH3 update failed");
  bytes_ += n;
}

std::string Xxh3Stream::hex() const {
  const XXH128_hash_t h = XXH3_128bits_digest(state_->s);
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

FileChecksum checksum_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) OLMO2_THROW(InputError, "cannot open ", path, ": ", std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  Xxh3Stream h;
  std::vector<char> buf(size_t{4} << 20);
  for (;;) {
    const ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      OLMO2_THROW(InputError, "reading ", path, " failed: ", std::strerror(err));
    }
    if (got == 0) break;
    h.update(buf.data(), static_cast<size_t>(got));
  }
  ::close(fd);
  return {h.bytes(), h.hex()};
}

}  // namespace olmo2
