#include "runtime/train/checkpoint_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "ops/tensor_ops.h"
#include "runtime/io/file_checksum.h"
#include "runtime/io/safetensors_writer.h"
#include "runtime/train/generation_config_file.h"
#include "runtime/train/save_directory.h"

namespace olmo2 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kMaxStep = 99999999;
constexpr char kStateJson[] = "training_state.json";
constexpr char kStateTensors[] = "training_state.safetensors";

std::atomic<int> g_fault_after_files{-1};

// Thrown by the test hook: a simulated crash, so the temporary directory is kept.
class SimulatedCrash : public Error {
 public:
  using Error::Error;
};

std::string os_error(int err) { return std::strerror(err); }

void check_name(const std::string& kind, const std::string& name, std::set<std::string>& seen) {
  if (name.empty() || name == "__metadata__") OLMO2_THROW(InputError, "invalid ", kind, " tensor name \"", name, "\"");
  if (!seen.insert(name).second) OLMO2_THROW(InputError, kind, " tensor ", name, " is listed twice");
}

// Throws InputError for a plan the writer cannot write (checked before any file is touched).
void validate(int64_t step, const CheckpointPlan& c, int64_t max_shard_bytes) {
  if (step < 0 || step > kMaxStep) {
    OLMO2_THROW(InputError, "checkpoint step ", step, " is outside [0, ", kMaxStep, "]");
  }
  if (max_shard_bytes <= 0) OLMO2_THROW(InputError, "max_shard_bytes must be positive, got ", max_shard_bytes);
  if (c.model_tensors.empty()) OLMO2_THROW(InputError, "checkpoint of step ", step, " has no model tensors");
  std::set<std::string> model, state;
  const DType first = c.model_tensors.front().dtype;
  for (const TensorSpec& t : c.model_tensors) {
    check_name("model", t.name, model);
    if ((t.dtype != DType::F32 && t.dtype != DType::BF16) || t.dtype != first) {
      OLMO2_THROW(InputError, "model tensor ", t.name, " is ", dtype_name(t.dtype),
                  "; checkpoints store the model in f32 or bf16, every tensor alike (the first is ",
                  dtype_name(first), ")");
    }
  }
  for (const TensorSpec& t : c.state_tensors) check_name("state", t.name, state);
  if (!c.tokenizer_file.empty()) {
    std::ifstream in(c.tokenizer_file, std::ios::binary);
    if (!in) OLMO2_THROW(InputError, "cannot read tokenizer file ", c.tokenizer_file, ": ", os_error(errno));
  }
}

// Shards as huggingface_hub's split_state_dict_into_shards_factory (what
// save_pretrained uses): tensors in order, a new shard when the next tensor would
// overflow the current one, a tensor larger than the limit alone in its own shard.
std::vector<std::vector<size_t>> plan_shards(const std::vector<TensorSpec>& tensors, int64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_size = 0;
  const auto limit = static_cast<uint64_t>(max_shard_bytes);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t size = tensors[i].bytes();
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

}  // namespace

void set_checkpoint_fault_for_testing(int after_files) { g_fault_after_files = after_files; }

uint64_t TensorSpec::bytes() const {
  uint64_t n = dtype_size(dtype);
  for (const int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// One file of the checkpoint, in writing order: a text (written whole), a copy of the
// tokenizer, or a safetensors file whose tensors arrive through write().
struct CheckpointWriter::File {
  enum Kind { Text, Copy, Tensors } kind;
  std::string name;
  std::string text;                         // Text: the contents; Copy: the source path
  std::map<std::string, TensorSpec> specs;  // Tensors: by name, the order in the file
};

struct CheckpointWriter::Output {
  explicit Output(const std::string& path) : file(path) {}
  HashedFileWriter file;
};

CheckpointWriter::CheckpointWriter(const std::string& save_dir, int64_t step, CheckpointPlan plan, int keep,
                                   int64_t max_shard_bytes)
    : save_dir_(save_dir), step_(step), keep_(keep), plan_(std::move(plan)) {
  validate(step, plan_, max_shard_bytes);
  std::error_code ec;
  fs::create_directories(save_dir_, ec);
  if (ec) OLMO2_THROW(InputError, "cannot create checkpoint directory ", save_dir_, ": ", ec.message());
  if (!fs::is_directory(save_dir_, ec)) {
    OLMO2_THROW(InputError, "checkpoint directory ", save_dir_, " is not a directory");
  }

  // The files in writing order (the crash hook counts them in this order).
  ModelConfig config = plan_.config;
  config.dtype = plan_.model_tensors.front().dtype;  // f32 or bf16, checked above
  files_.push_back({File::Text, "config.json", config.to_json().dump(2) + "\n", {}});
  files_.push_back({File::Text, "generation_config.json",
                    checkpoint_generation_config(config, plan_.kept_generation_config).dump(2) + "\n", {}});
  const std::vector<std::vector<size_t>> shards = plan_shards(plan_.model_tensors, max_shard_bytes);
  json weight_map = json::object();
  uint64_t total_size = 0;
  int64_t total_parameters = 0;
  for (size_t k = 0; k < shards.size(); ++k) {
    File f{File::Tensors, shards.size() == 1 ? "model.safetensors" : shard_name(k, shards.size()), "", {}};
    for (const size_t i : shards[k]) {
      const TensorSpec& t = plan_.model_tensors[i];
      f.specs.emplace(t.name, t);
      weight_map[t.name] = f.name;
      total_size += t.bytes();
      int64_t numel = 1;
      for (const int64_t d : t.shape) numel *= d;
      total_parameters += numel;
    }
    files_.push_back(std::move(f));
  }
  if (shards.size() > 1) {
    const json index = {{"metadata", {{"total_parameters", total_parameters}, {"total_size", total_size}}},
                        {"weight_map", weight_map}};
    files_.push_back({File::Text, "model.safetensors.index.json", index.dump(2) + "\n", {}});
  }
  if (!plan_.tokenizer_file.empty()) {
    files_.push_back({File::Copy, "tokenizer.json", plan_.tokenizer_file, {}});
    // The tokenizer_config.json beside it travels with it: the tokenizer's EOS, padding
    // and BOS tokens and the chat template (docs/architecture.md §7 "Checkpoints", §8).
    const fs::path beside = fs::path(plan_.tokenizer_file).parent_path() / "tokenizer_config.json";
    if (fs::is_regular_file(beside)) files_.push_back({File::Copy, "tokenizer_config.json", beside.string(), {}});
  }
  File state{File::Tensors, kStateTensors, "", {}};
  for (const TensorSpec& t : plan_.state_tensors) state.specs.emplace(t.name, t);
  files_.push_back(std::move(state));
  for (const File& f : files_) {
    for (const auto& [name, spec] : f.specs) order_.push_back(name);
  }

  remove_stale_saves(save_dir_);
  const std::string name = checkpoint_dir_name(step);
  const std::string tag = name.substr(5) + "-" + std::to_string(::getpid());
  tmp_ = (fs::path(save_dir_) / (kCheckpointTmpPrefix + tag)).string();
  final_path_ = (fs::path(save_dir_) / name).string();
  if (::mkdir(tmp_.c_str(), 0755) != 0) OLMO2_THROW(Error, "cannot create ", tmp_, ": ", os_error(errno));
  fault_after_ = g_fault_after_files.load();
  try {
    if (fault_after_ == 0) OLMO2_THROW(SimulatedCrash, "simulated crash after 0 files of ", tmp_);
    advance();
  } catch (const SimulatedCrash&) {
    throw;  // a crash leaves the temporary directory behind
  } catch (...) {
    std::error_code rm_ec;
    fs::remove_all(tmp_, rm_ec);
    throw;
  }
}

CheckpointWriter::~CheckpointWriter() {
  out_.reset();
  if (finished_ || crashed_ || tmp_.empty()) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

const std::string& CheckpointWriter::next() const {
  static const std::string none;
  return next_ < order_.size() ? order_[next_] : none;
}

void CheckpointWriter::fail_if_broken() const {
  if (broken_) OLMO2_THROW(Error, "the checkpoint writer of ", tmp_, " failed earlier; nothing more is written");
  if (finished_) OLMO2_THROW(Error, "the checkpoint ", final_path_, " is already finished");
}

void CheckpointWriter::file_done() {
  ++files_done_;
  if (fault_after_ >= 0 && files_done_ >= fault_after_) {
    crashed_ = true;
    OLMO2_THROW(SimulatedCrash, "simulated crash after ", files_done_, " files of ", tmp_);
  }
}

void CheckpointWriter::advance() {
  while (file_ < files_.size()) {
    File& f = files_[file_];
    const std::string path = (fs::path(tmp_) / f.name).string();
    if (f.kind == File::Tensors) {
      if (!out_) {
        std::map<std::string, TensorView> shapes;  // the header reads dtypes and shapes only
        for (const auto& [name, spec] : f.specs) shapes.emplace(name, TensorView(nullptr, spec.dtype, spec.shape));
        out_ = std::make_unique<Output>(path);
        out_->file.write(safetensors_header(shapes));
        in_file_ = 0;
      }
      if (in_file_ < f.specs.size()) return;  // waits for its next tensor
      out_->file.close();
      checksums_[f.name] = {{"bytes", out_->file.checksum().bytes}, {kChecksumAlgorithm, out_->file.checksum().xxh3_128}};
      out_.reset();
    } else {
      const FileChecksum sum = f.kind == File::Text ? write_text_file(path, f.text) : copy_file_hashed(f.text, path);
      checksums_[f.name] = {{"bytes", sum.bytes}, {kChecksumAlgorithm, sum.xxh3_128}};
    }
    ++file_;
    file_done();
  }
}

void CheckpointWriter::write(const std::string& name, const TensorView& data) {
  fail_if_broken();
  if (next_ >= order_.size()) {
    OLMO2_THROW(InputError, "checkpoint tensor ", name, " arrived after every planned tensor was written");
  }
  const TensorSpec& spec = files_[file_].specs.at(order_[next_]);
  if (name != spec.name) {
    OLMO2_THROW(InputError, "checkpoint tensor ", name, " arrived out of order: expected ", spec.name);
  }
  if (data.dtype() != spec.dtype || data.shape() != spec.shape) {
    OLMO2_THROW(InputError, "checkpoint tensor ", name, " is ", dtype_name(data.dtype()), " ", data.shape_str(),
                ", planned as ", dtype_name(spec.dtype), " ", shape_to_string(spec.shape));
  }
  if (!data.is_contiguous()) {
    OLMO2_THROW(InputError, "checkpoint tensor ", name, " ", data.shape_str(), " must be a contiguous tensor to be saved");
  }
  if (data.data() == nullptr && data.numel() > 0) OLMO2_THROW(InputError, "checkpoint tensor ", name, " has no data");
  try {
    if (data.device() == Device::CPU || data.numel() == 0) {
      out_->file.write(data.data(), data.bytes());
    } else {  // staged to the host through one reused buffer
      if (staging_bytes_ < data.bytes()) staging_.reset(new char[data.bytes()]), staging_bytes_ = data.bytes();
      const TensorView host(staging_.get(), data.dtype(), data.shape());
      ops::copy(data, host);
      out_->file.write(host.data(), host.bytes());
    }
    ++next_, ++in_file_;
    advance();
  } catch (...) {
    broken_ = true;
    throw;
  }
}

std::string CheckpointWriter::finish() {
  fail_if_broken();
  if (next_ < order_.size()) {
    OLMO2_THROW(Error, "checkpoint ", tmp_, " is incomplete: tensor ", order_[next_], " (and ",
                order_.size() - next_ - 1, " after it) never written");
  }
  try {
    // Last: its presence marks a complete checkpoint (latest_checkpoint).
    const json state = {{"format_version", kTrainingStateFormatVersion},
                        {"step", step_},
                        {"state", plan_.state},
                        {"files", checksums_}};
    write_text_file((fs::path(tmp_) / kStateJson).string(), state.dump(2) + "\n");
    file_done();
    fsync_directory(tmp_);
    install_checkpoint_dir(tmp_, final_path_, tmp_ + kCheckpointAsideSuffix);
    finished_ = true;
    fsync_directory(save_dir_);
  } catch (...) {
    broken_ = true;
    throw;
  }
  prune_checkpoints(save_dir_, keep_, step_);
  return final_path_;
}

}  // namespace olmo2