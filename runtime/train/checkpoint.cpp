#include "runtime/train/checkpoint.h"

#include "runtime/io/safetensors_writer.h"
#include "runtime/io/file_checksum.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "ops/tensor_ops.h"

namespace olmo2 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr char kStepPrefix[] = "step-";
constexpr size_t kStepDigits = 8;
constexpr int64_t kMaxStep = 99999999;
constexpr char kTmpPrefix[] = ".tmp-step-";
constexpr char kAsideSuffix[] = "-old";
constexpr char kStateJson[] = "training_state.json";
constexpr char kStateTensors[] = "training_state.safetensors";

std::atomic<int> g_fault_after_files{-1};

// Thrown by the test hook: a simulated crash, so the temporary directory is kept.
class SimulatedCrash : public Error {
 public:
  using Error::Error;
};

std::string os_error(int err) { return std::strerror(err); }

// The step of a directory named "step-" + 8 digits, or -1 for any other name.
int64_t step_of(const std::string& name) {
  const size_t prefix = sizeof(kStepPrefix) - 1;
  if (name.size() != prefix + kStepDigits || name.compare(0, prefix, kStepPrefix) != 0) return -1;
  int64_t step = 0;
  for (size_t i = prefix; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// A file written with POSIX calls so that every failure (ENOSPC, EIO) is reported with
// its errno; close() fsyncs before closing. Destroying an open writer just closes it.
// Every byte written is also hashed (checksum()), for training_state.json's "files".
class FileWriter {
 public:
  explicit FileWriter(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) OLMO2_THROW(Error, "cannot create ", path_, ": ", os_error(errno));
  }
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }

  void write(const void* data, size_t n) {
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
  void write(const std::string& s) { write(s.data(), s.size()); }
  FileChecksum checksum() const { return {hash_.bytes(), hash_.hex()}; }

  void close() {
    if (::fsync(fd_) != 0) OLMO2_THROW(Error, "fsync of ", path_, " failed: ", os_error(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) OLMO2_THROW(Error, "closing ", path_, " failed: ", os_error(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
  Xxh3Stream hash_;
};

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) OLMO2_THROW(Error, "cannot open directory ", dir, " to fsync it: ", os_error(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) OLMO2_THROW(Error, "fsync of directory ", dir, " failed: ", os_error(err));
}

// The safetensors layout of runtime/io/safetensors_writer.h, written through FileWriter so
// that it is fsynced and every OS error is reported.
// A device view is copied to the host one tensor at a time (ops::copy into one reused
// host buffer), so a save never holds more than the largest tensor in host memory.
FileChecksum write_safetensors(const std::string& path, const std::map<std::string, TensorView>& tensors) {
  const std::string header = safetensors_header(tensors);
  FileWriter out(path);
  out.write(header);
  Buffer staging;
  for (const auto& [name, view] : tensors) {
    if (view.device() == Device::CPU || view.numel() == 0) {
      out.write(view.data(), view.bytes());
      continue;
    }
    if (staging.bytes() < view.bytes()) staging = Buffer(view.bytes());
    const TensorView host(staging.data(), view.dtype(), view.shape());
    ops::copy(view, host);
    out.write(host.data(), host.bytes());
  }
  out.close();
  return out.checksum();
}

FileChecksum write_text(const std::string& path, const std::string& text) {
  FileWriter out(path);
  out.write(text);
  out.close();
  return out.checksum();
}

FileChecksum copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) OLMO2_THROW(InputError, "cannot read ", from, ": ", os_error(errno));
  FileWriter out(to);
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

// Throws InputError for contents save_checkpoint cannot write (checked before any file
// is touched).
void validate(int64_t step, const CheckpointContents& c, int64_t max_shard_bytes) {
  if (step < 0 || step > kMaxStep) {
    OLMO2_THROW(InputError, "checkpoint step ", step, " is outside [0, ", kMaxStep, "]");
  }
  if (max_shard_bytes <= 0)
    OLMO2_THROW(InputError, "max_shard_bytes must be positive, got ", max_shard_bytes);
  if (c.model_tensors.empty())
    OLMO2_THROW(InputError, "checkpoint of step ", step, " has no model tensors");
  std::set<std::string> seen;
  for (const auto& [name, view] : c.model_tensors) {
    if (name.empty() || name == "__metadata__") {
      OLMO2_THROW(InputError, "invalid model tensor name \"", name, "\"");
    }
    if (!seen.insert(name).second)
      OLMO2_THROW(InputError, "model tensor ", name, " is listed twice");
    if (view.data() == nullptr) OLMO2_THROW(InputError, "model tensor ", name, " has no data");
    const DType first = c.model_tensors.front().second.dtype();
    if ((view.dtype() != DType::F32 && view.dtype() != DType::BF16) || view.dtype() != first) {
      OLMO2_THROW(InputError, "model tensor ", name, " is ", dtype_name(view.dtype()),
                  "; checkpoints store the model in f32 or bf16, every tensor alike (the first is ",
                  dtype_name(first), ")");
    }
    if (!view.is_contiguous()) {
      OLMO2_THROW(InputError, "model tensor ", name, " ", view.shape_str(), " must be a contiguous tensor to be saved");
    }
  }
  for (const auto& [name, view] : c.state_tensors) {
    if (name.empty() || name == "__metadata__") {
      OLMO2_THROW(InputError, "invalid state tensor name \"", name, "\"");
    }
    if (view.data() == nullptr) OLMO2_THROW(InputError, "state tensor ", name, " has no data");
    if (!view.is_contiguous()) {
      OLMO2_THROW(InputError, "state tensor ", name, " ", view.shape_str(), " must be a contiguous tensor to be saved");
    }
  }
  if (!c.tokenizer_file.empty()) {
    std::ifstream in(c.tokenizer_file, std::ios::binary);
    if (!in)
      OLMO2_THROW(InputError, "cannot read tokenizer file ", c.tokenizer_file, ": ",
                  os_error(errno));
  }
}

// Shards as huggingface_hub's split_state_dict_into_shards_factory (what
// save_pretrained uses): tensors in order, a new shard when the next tensor would
// overflow the current one, a tensor larger than the limit alone in its own shard.
std::vector<std::vector<size_t>> plan_shards(const CheckpointContents& c, int64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_size = 0;
  const auto limit = static_cast<uint64_t>(max_shard_bytes);
  for (size_t i = 0; i < c.model_tensors.size(); ++i) {
    const uint64_t size = c.model_tensors[i].second.bytes();
    if (size > limit) {
      shards.push_back({i});
      continue;
    }
    if (current_size + size > limit) {
      shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(i);
    current_size += size;
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return buf;
}

// Removes what crashed saves left in save_dir: temporary directories, and an old
// checkpoint set aside for a re-save (restored when its new version never arrived).
void remove_stale(const std::string& save_dir) {
  std::error_code ec;
  for (fs::directory_iterator it(save_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kTmpPrefix, 0) != 0) continue;
    const size_t aside = sizeof(kAsideSuffix) - 1;
    if (name.size() > aside && name.compare(name.size() - aside, aside, kAsideSuffix) == 0) {
      const std::string step_name = kStepPrefix + name.substr(sizeof(kTmpPrefix) - 1, kStepDigits);
      const fs::path final_path = fs::path(save_dir) / step_name;
      std::error_code exists_ec;
      if (step_of(step_name) >= 0 && !fs::exists(final_path, exists_ec) &&
          ::rename(it->path().c_str(), final_path.c_str()) == 0) {
        continue;
      }
    }
    std::error_code rm_ec;
    fs::remove_all(it->path(), rm_ec);
    if (rm_ec) {
      std::fprintf(stderr, "olmo2: cannot remove stale checkpoint directory %s: %s\n",
                   it->path().c_str(), rm_ec.message().c_str());
    }
  }
}

// Moves the complete directory `tmp` to `final_path`, replacing an existing one.
void install(const std::string& tmp, const std::string& final_path, const std::string& aside) {
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
    OLMO2_THROW(Error, "cannot move the existing ", final_path, " aside to ", aside, ": ",
                os_error(errno));
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int e = errno;
    ::rename(aside.c_str(), final_path.c_str());
    OLMO2_THROW(Error, "cannot rename ", tmp, " to ", final_path, ": ", os_error(e));
  }
  std::error_code ec;
  fs::remove_all(aside, ec);
}

// Keeps the newest `keep` step directories (and `current`).
void prune(const std::string& save_dir, int keep, int64_t current) {
  if (keep <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::error_code ec;
  for (fs::directory_iterator it(save_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t s = step_of(it->path().filename().string());
    std::error_code dir_ec;
    if (s >= 0 && it->is_directory(dir_ec)) steps.emplace_back(s, it->path());
  }
  std::sort(steps.begin(), steps.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
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
      fsync_dir(save_dir);
    } catch (const Error&) {
      // The removal is not needed for correctness; the new checkpoint is durable.
    }
  }
}

json generation_config(const ModelConfig& c) {
  json g = {{"_from_model_config", true}};
  if (c.eos_token_ids.size() == 1) {
    g["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    g["eos_token_id"] = c.eos_token_ids;
  }
  if (c.pad_token_id) g["pad_token_id"] = *c.pad_token_id;
  if (c.bos_token_id) g["bos_token_id"] = *c.bos_token_id;
  return g;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08lld", kStepPrefix, static_cast<long long>(step));
  return buf;
}

void set_checkpoint_fault_for_testing(int after_files) { g_fault_after_files = after_files; }

std::string save_checkpoint(const std::string& save_dir, int64_t step, const CheckpointContents& c,
                            int keep, int64_t max_shard_bytes) {
  validate(step, c, max_shard_bytes);
  const std::vector<std::vector<size_t>> shards = plan_shards(c, max_shard_bytes);

  std::error_code ec;
  fs::create_directories(save_dir, ec);
  if (ec)
    OLMO2_THROW(InputError, "cannot create checkpoint directory ", save_dir, ": ", ec.message());
  if (!fs::is_directory(save_dir, ec)) {
    OLMO2_THROW(InputError, "checkpoint directory ", save_dir, " is not a directory");
  }
  remove_stale(save_dir);

  const std::string name = checkpoint_dir_name(step);
  const std::string tag = name.substr(sizeof(kStepPrefix) - 1) + "-" + std::to_string(::getpid());
  const std::string tmp = (fs::path(save_dir) / (kTmpPrefix + tag)).string();
  const std::string final_path = (fs::path(save_dir) / name).string();
  if (::mkdir(tmp.c_str(), 0755) != 0) {
    OLMO2_THROW(Error, "cannot create ", tmp, ": ", os_error(errno));
  }

  const int fault_after = g_fault_after_files.load();
  int files = 0;
  auto crash_point = [&] {
    if (fault_after >= 0 && files >= fault_after) {
      OLMO2_THROW(SimulatedCrash, "simulated crash after ", files, " files of ", tmp);
    }
  };
  auto file_done = [&] {
    ++files;
    crash_point();
  };
  auto at = [&](const std::string& file) { return (fs::path(tmp) / file).string(); };
  json checksums = json::object();  // every file but training_state.json: {bytes, xxh3_128}
  auto record = [&](const std::string& file, const FileChecksum& sum) {
    checksums[file] = {{"bytes", sum.bytes}, {kChecksumAlgorithm, sum.xxh3_128}};
  };

  try {
    crash_point();
    ModelConfig config = c.config;
    config.dtype = c.model_tensors.front().second.dtype();  // f32 or bf16, checked above
    record("config.json", write_text(at("config.json"), config.to_json().dump(2) + "\n"));
    file_done();
    record("generation_config.json", write_text(at("generation_config.json"), generation_config(config).dump(2) + "\n"));
    file_done();

    json weight_map = json::object();
    uint64_t total_size = 0;
    int64_t total_parameters = 0;
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string file =
          shards.size() == 1 ? "model.safetensors" : shard_name(k, shards.size());
      std::map<std::string, TensorView> tensors;
      for (size_t i : shards[k]) {
        const auto& [tname, view] = c.model_tensors[i];
        tensors.emplace(tname, view);
        weight_map[tname] = file;
        total_size += view.bytes();
        total_parameters += view.numel();
      }
      record(file, write_safetensors(at(file), tensors));
      file_done();
    }
    if (shards.size() > 1) {
      const json index = {
          {"metadata", {{"total_parameters", total_parameters}, {"total_size", total_size}}},
          {"weight_map", weight_map}};
      record("model.safetensors.index.json", write_text(at("model.safetensors.index.json"), index.dump(2) + "\n"));
      file_done();
    }
    if (!c.tokenizer_file.empty()) {
      record("tokenizer.json", copy_file(c.tokenizer_file, at("tokenizer.json")));
      file_done();
    }
    record(kStateTensors, write_safetensors(at(kStateTensors), c.state_tensors));
    file_done();
    // Last: its presence marks a complete checkpoint (latest_checkpoint).
    const json state = {{"format_version", kTrainingStateFormatVersion},
                         {"step", step},
                         {"state", c.state},
                         {"files", checksums}};
    write_text(at(kStateJson), state.dump(2) + "\n");
    file_done();

    fsync_dir(tmp);
    install(tmp, final_path, tmp + kAsideSuffix);
    fsync_dir(save_dir);
  } catch (const SimulatedCrash&) {
    throw;  // a crash leaves the temporary directory behind
  } catch (...) {
    std::error_code rm_ec;
    fs::remove_all(tmp, rm_ec);
    throw;
  }
  prune(save_dir, keep, step);
  return final_path;
}

std::string latest_checkpoint(const std::string& save_dir) {
  const std::vector<std::string> all = complete_checkpoints(save_dir);
  return all.empty() ? std::string() : all.front();
}

std::vector<std::string> complete_checkpoints(const std::string& save_dir) {
  std::error_code ec;
  std::vector<std::pair<int64_t, std::string>> found;
  for (fs::directory_iterator it(save_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t s = step_of(it->path().filename().string());
    std::error_code file_ec;
    if (s >= 0 && it->is_directory(file_ec) && fs::is_regular_file(it->path() / kStateJson, file_ec)) {
      found.emplace_back(s, it->path().string());
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

int64_t checkpoint_step_of(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "…/step-00000120/"
  return step_of(p.filename().string());
}

Tensor TrainingState::load_f32(const std::string& name,
                               const std::vector<int64_t>& expected) const {
  const auto& all = tensors->tensors();
  const auto it = all.find(name);
  if (it == all.end()) OLMO2_THROW(InputError, tensors->path(), " has no tensor ", name);
  const TensorInfo& info = it->second;
  if (info.dtype_tag != "F32") {
    OLMO2_THROW(InputError, tensors->path(), ": tensor ", name, " is ", info.dtype_tag,
                ", expected F32");
  }
  if (info.shape != expected) {
    OLMO2_THROW(InputError, tensors->path(), ": tensor ", name, " has shape ",
                shape_to_string(info.shape), ", expected ", shape_to_string(expected));
  }
  Tensor out = Tensor::zeros(expected);
  if (out.numel() > 0) std::memcpy(out.f32(), tensors->data(info), info.end - info.begin);
  return out;
}

TrainingState load_training_state(const std::string& checkpoint_dir) {
  TrainingState ts;
  ts.dir = checkpoint_dir;
  const std::string json_path = (fs::path(checkpoint_dir) / kStateJson).string();
  std::ifstream in(json_path, std::ios::binary);
  if (!in) OLMO2_THROW(InputError, "cannot read ", json_path, ": ", os_error(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) OLMO2_THROW(InputError, "reading ", json_path, " failed: ", os_error(errno));
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    OLMO2_THROW(InputError, json_path, " is not valid JSON: ", e.what());
  }
  if (!j.is_object()) OLMO2_THROW(InputError, json_path, " is not a JSON object");
  const auto version = j.find("format_version");
  if (version == j.end() || !version->is_number_integer()) {
    OLMO2_THROW(InputError, json_path, " has no integer format_version");
  }
  if (version->get<int64_t>() != kTrainingStateFormatVersion) {
    OLMO2_THROW(InputError, json_path, " has format_version ", version->get<int64_t>(),
                "; this program reads version ", kTrainingStateFormatVersion);
  }
  const auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 0) {
    OLMO2_THROW(InputError, json_path, " has no non-negative integer step");
  }
  const auto state = j.find("state");
  if (state == j.end()) OLMO2_THROW(InputError, json_path, " has no state");
  ts.step = step->get<int64_t>();
  ts.state = *state;
  ts.tensors =
      std::make_unique<SafetensorsFile>((fs::path(checkpoint_dir) / kStateTensors).string());
  return ts;
}

}  // namespace olmo2
