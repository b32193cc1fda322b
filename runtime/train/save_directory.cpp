#include "runtime/train/save_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "core/error.h"
#include "runtime/train/checkpoint.h"

namespace olmo2 {

namespace fs = std::filesystem;

namespace {
std::string os_error(int err) { return std::strerror(err); }
constexpr size_t kStepDigits = 8;
}  // namespace

HashedFileWriter::HashedFileWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) OLMO2_THROW(Error, "cannot create ", path_, ": ", os_error(errno));
}

HashedFileWriter::~HashedFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void HashedFileWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      OLMO2_THROW(Error, "writing ", path_, " failed: ", os_error(errno));
    }
    if (w == 0) OLMO2_THROW(Error, "writing ", path_, " failed: no progress");
    hash_.update(p, static_cast<size_t>(w));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void HashedFileWriter::close() {
  if (::fsync(fd_) != 0) OLMO2_THROW(Error, "fsync of ", path_, " failed: ", os_error(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) OLMO2_THROW(Error, "closing ", path_, " failed: ", os_error(errno));
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) OLMO2_THROW(Error, "cannot open directory ", dir, " to fsync it: ", os_error(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) OLMO2_THROW(Error, "fsync of directory ", dir, " failed: ", os_error(err));
}

FileChecksum write_text_file(const std::string& path, const std::string& text) {
  HashedFileWriter out(path);
  out.write(text);
  out.close();
  return out.checksum();
}

FileChecksum copy_file_hashed(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) OLMO2_THROW(InputError, "cannot read ", from, ": ", os_error(errno));
  HashedFileWriter out(to);
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    if (got > 0) out.write(buf.data(), static_cast<size_t>(got));
  }
  if (in.bad()) OLMO2_THROW(Error, "reading ", from, " failed: ", os_error(errno));
  out.close();
  return out.checksum();
}

void remove_stale_saves(const std::string& save_dir) {
  std::error_code ec;
  for (fs::directory_iterator it(save_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kCheckpointTmpPrefix, 0) != 0) continue;
    const size_t aside = sizeof(kCheckpointAsideSuffix) - 1;
    if (name.size() > aside && name.compare(name.size() - aside, aside, kCheckpointAsideSuffix) == 0) {
      const std::string step_name = "step-" + name.substr(sizeof(kCheckpointTmpPrefix) - 1, kStepDigits);
      const fs::path final_path = fs::path(save_dir) / step_name;
      std::error_code exists_ec;
      if (checkpoint_step_of(step_name) >= 0 && !fs::exists(final_path, exists_ec) &&
          ::rename(it->path().c_str(), final_path.c_str()) == 0) {
        continue;
      }
    }
    std::error_code rm_ec;
    fs::remove_all(it->path(), rm_ec);
    if (rm_ec) {
      std::fprintf(stderr, "olmo2: cannot remove stale checkpoint directory %s: %s\n", it->path().c_str(),
                   rm_ec.message().c_str());
    }
  }
}

void install_checkpoint_dir(const std::string& tmp, const std::string& final_path, const std::string& aside) {
  if (::rename(tmp.c_str(), final_path.c_str()) == 0) return;
  const int err = errno;
  if (err != ENOTEMPTY && err != EEXIST && err != ENOTDIR && err != EISDIR) {
    OLMO2_THROW(Error, "cannot rename ", tmp, " to ", final_path, ": ", os_error(err));
  }
  // The step exists already (a re-save after a resume). Swap atomically where the
  // file system can, so that some complete version is in place at every moment.
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // now the old version; a leftover is removed by the next save
    return;
  }
  // Otherwise set the old one aside, move the new one in, then drop the old one. A crash
  // in between leaves the old one under `aside`, which the next save puts back.
  if (::rename(final_path.c_str(), aside.c_str()) != 0) {
    OLMO2_THROW(Error, "cannot move the existing ", final_path, " aside to ", aside, ": ", os_error(errno));
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int e = errno;
    ::rename(aside.c_str(), final_path.c_str());
    OLMO2_THROW(Error, "cannot rename ", tmp, " to ", final_path, ": ", os_error(e));
  }
  std::error_code ec;
  fs::remove_all(aside, ec);
}

void prune_checkpoints(const std::string& save_dir, int keep, int64_t current) {
  if (keep <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::error_code ec;
  for (fs::directory_iterator it(save_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t s = checkpoint_step_of(it->path().filename().string());
    std::error_code dir_ec;
    if (s >= 0 && it->is_directory(dir_ec)) steps.emplace_back(s, it->path());
  }
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  bool removed = false;
  for (size_t i = static_cast<size_t>(keep); i < steps.size(); ++i) {
    if (steps[i].first == current) continue;
    std::error_code rm_ec;
    fs::remove_all(steps[i].second, rm_ec);
    if (rm_ec) {
      std::fprintf(stderr, "olmo2: cannot remove old checkpoint %s: %s\n", steps[i].second.c_str(),
                   rm_ec.message().c_str());
    }
    removed = true;
  }
  if (removed) {
    try {
      fsync_directory(save_dir);
    } catch (const Error&) {
      // The removal is not needed for correctness; the new checkpoint is durable.
    }
  }
}

}  // namespace olmo2
