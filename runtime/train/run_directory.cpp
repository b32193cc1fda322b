#include "runtime/train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "runtime/train/checkpoint.h"

namespace olmo2 {
namespace fs = std::filesystem;

RunDirectory::~RunDirectory() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::vector<std::string> RunDirectory::resume_candidates(const std::string& resume, const std::string& save_dir,
                                                         bool fallback) {
  if (resume.empty()) return {};
  std::vector<std::string> out;
  if (resume == "auto") {
    out = complete_checkpoints(save_dir);
  } else {
    if (!fs::is_directory(resume)) OLMO2_THROW(InputError, "--resume: no checkpoint directory ", resume);
    if (!fs::exists(fs::path(resume) / "training_state.json")) {
      const std::vector<std::string> inside = complete_checkpoints(resume);
      if (!inside.empty()) {  // a save directory given where a checkpoint was meant
        OLMO2_THROW(InputError, "--resume ", resume, " is a save directory, not a checkpoint (it holds ", inside.size(),
                    inside.size() == 1 ? " checkpoint" : " checkpoints", ", the newest ", inside.front(),
                    "): give --resume ", inside.front(), ", or --save-dir ", resume, " --resume auto");
      }
    }
    out.push_back(resume);
    const int64_t step = checkpoint_step_of(resume);
    if (fallback && step >= 0) {
      fs::path parent = fs::path(resume).lexically_normal();
      if (parent.filename().empty()) parent = parent.parent_path();
      parent = parent.parent_path();
      for (const std::string& older : complete_checkpoints(parent.empty() ? "." : parent.string())) {
        if (checkpoint_step_of(older) < step) out.push_back(older);
      }
    }
  }
  if (!fallback && out.size() > 1) out.resize(1);
  return out;
}

void RunDirectory::lock(const std::string& dir, const std::string& resume_dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    OLMO2_THROW(InputError, "--save-dir ", dir, ": cannot create the directory (",
                ec ? ec.message() : "not a directory", ")");
  }
  const std::string lock = dir + "/.lock";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) OLMO2_THROW(InputError, "--save-dir ", dir, ": cannot write ", lock, " (", std::strerror(errno), ")");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    OLMO2_THROW(InputError, "--save-dir ", dir, " is in use by another olmo2 train (", lock,
                " is locked); give each run its own --save-dir");
  }
  const std::string latest = latest_checkpoint(dir);
  // The resumed checkpoint's folder, not where a symlinked step directory points.
  if (!latest.empty() &&
      (resume_dir.empty() || fs::canonical(fs::absolute(resume_dir).lexically_normal().parent_path()) != fs::canonical(dir))) {
    OLMO2_THROW(InputError, "--save-dir ", dir, " already holds checkpoints of another run (newest ", latest,
                "); give --resume to continue it, or another --save-dir");
  }
}

void RunDirectory::choose_tokenizer_source(const std::string& tokenizer, const std::string& from) {
  tokenizer_given_ = !tokenizer.empty();
  if (!tokenizer.empty()) {
    tokenizer_source_ = tokenizer;
  } else if (!from.empty() && fs::is_regular_file(from + "/tokenizer.json")) {
    tokenizer_source_ = from + "/tokenizer.json";
  }
}

void RunDirectory::checkpoint_written(const std::string& path) {
  if (!tokenizer_source_.empty() && !tokenizer_given_) tokenizer_source_ = path + "/tokenizer.json";
}

}  // namespace olmo2
