// Streaming checkpoint writer (docs/architecture.md §7 "Checkpoints", "Checkpoint writing
// at scale"): the layout of every file of a checkpoint is fixed from the tensors' names,
// dtypes and shapes before any data; the tensors are then handed over one at a time, in
// the order the files hold them, and written (and hashed) as they arrive. The directory
// it produces is the one checkpoint.h describes, byte for byte what save_checkpoint
// writes for the same tensors (save_checkpoint is a wrapper over this writer).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "runtime/model/config.h"
#include "runtime/train/checkpoint.h"

namespace olmo2 {

/// A tensor of a checkpoint before its data: its name, dtype and shape.
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// Bytes of its data (numel · dtype size).
  uint64_t bytes() const;
};

/// What a CheckpointWriter writes, without data: CheckpointContents with specs for views.
struct CheckpointPlan {
  /// Written as config.json, with the model tensors' dtype.
  ModelConfig config;
  /// The model in state-dict order (the order decides the shards, as in
  /// CheckpointContents::model_tensors): f32 or bf16, every tensor alike.
  std::vector<TensorSpec> model_tensors;
  /// training_state.safetensors' tensors, any dtype, any order (written in name order).
  std::vector<TensorSpec> state_tensors;
  /// CheckpointContents::state.
  nlohmann::json state = nlohmann::json::object();
  /// Optional file copied in as tokenizer.json ("" = none), with the
  /// tokenizer_config.json beside it when there is one (its roles and chat template).
  std::string tokenizer_file;
  /// What generation_config.json keeps of the model the run started from
  /// (generation_config_to_keep, generation_config_file.h; empty: the config's ids alone).
  nlohmann::json kept_generation_config = nlohmann::json::object();
};

/// Writes one checkpoint, `save_dir/step-NNNNNNNN/`, from a plan and then its tensors
/// one at a time. The procedure, the layout and the guarantees are save_checkpoint's
/// (checkpoint.h): stale temporary directories removed, files written into
/// `.tmp-step-<step>-<pid>/` and fsynced, the directory renamed (or exchanged) into
/// place by finish(), the newest `keep` kept, the crash test hook honoured. The writer
/// holds at most one tensor's bytes (a device tensor is staged to the host in one
/// reused buffer); nothing else of the model. Not thread-safe; one writer per save.
class CheckpointWriter {
 public:
  /// Validates the plan before touching the disk — InputError for a step outside
  /// [0, 99999999], max_shard_bytes ≤ 0, no model tensors, an empty, "__metadata__" or
  /// repeated name, model tensors not all f32 or all bf16, an unreadable tokenizer file;
  /// InputError when `save_dir` cannot be created or is not a directory — then creates
  /// the temporary directory, writes config.json and generation_config.json and opens
  /// the first model shard. Error naming the file and OS reason when a write fails (the
  /// temporary directory is then removed).
  CheckpointWriter(const std::string& save_dir, int64_t step, CheckpointPlan plan, int keep,
                   int64_t max_shard_bytes = kDefaultMaxShardBytes);
  /// An unfinished writer removes its temporary directory (but not after the crash test
  /// hook fired: a simulated crash leaves it for the next save, as a real one would).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  /// Every tensor name in the order write() takes them: the model shards in turn, each
  /// shard's tensors in name order (safetensors sorts them), then the state tensors in
  /// name order.
  const std::vector<std::string>& order() const { return order_; }
  /// Name of the tensor write() expects next; "" once every tensor is written.
  const std::string& next() const;

  /// Writes the next tensor: `data` must be named next(), have the planned dtype and
  /// shape, be contiguous, on any device. Completed files are closed (fsynced) and the
  /// files without tensors that follow them (index, tokenizer) written. InputError for a
  /// name out of order or a view that does not match its spec; Error naming the file
  /// and OS reason for a failed write. A refused tensor (InputError) changes nothing; after
  /// a failed write the writer refuses every further call (Error).
  void write(const std::string& name, const TensorView& data);

  /// After the last tensor: writes training_state.json (with every file's checksum),
  /// fsyncs, renames the directory into place, fsyncs `save_dir`, prunes to `keep`, and
  /// returns the checkpoint's path. Error when tensors are missing (naming the next) or
  /// a write or rename fails.
  std::string finish();

 private:
  struct File;
  void advance();  // closes finished files, writes tensorless ones, opens the next
  void file_done();
  void fail_if_broken() const;

  std::string save_dir_, tmp_, final_path_;
  int64_t step_ = 0;
  int keep_ = 0;
  CheckpointPlan plan_;
  std::vector<File> files_;
  std::vector<std::string> order_;
  size_t next_ = 0;       // index in order_
  size_t file_ = 0;       // index in files_ of the file being written
  size_t in_file_ = 0;    // tensors of files_[file_] written so far
  int files_done_ = 0, fault_after_ = -1;
  bool finished_ = false, crashed_ = false, broken_ = false;
  nlohmann::json checksums_ = nlohmann::json::object();
  struct Output;
  std::unique_ptr<Output> out_;  // the open tensor file, if any
  std::unique_ptr<char[]> staging_;
  size_t staging_bytes_ = 0;
};

}  // namespace olmo2
