// Training checkpoints (docs/architecture.md §7 "Checkpoints"): the model in the Hugging Face
// layout, loadable by `transformers` and by Olmo2Model::load, beside the training state; each
// checkpoint written to a temporary directory and renamed into place when complete.
//
// Layout of SAVE_DIR/step-NNNNNNNN/ (step zero-padded to 8 digits):
//   config.json                      ModelConfig::to_json, dtype float32
//   generation_config.json           eos / pad / bos ids
//   model.safetensors                when the model fits in one shard, else
//   model-0000k-of-0000N.safetensors + model.safetensors.index.json
//                                    ({"metadata": {"total_parameters", "total_size"},
//                                      "weight_map": {name: file}}), split as transformers'
//                                      save_pretrained splits a state dict
//   tokenizer.json                   when CheckpointContents::tokenizer_file is set
//   tokenizer_config.json            …and a tokenizer_config.json lies beside that file
//   training_state.safetensors       CheckpointContents::state_tensors
//   training_state.json              {"format_version": 1, "step": N, "state": {...},
//                                      "files": {file: {"bytes": n, "xxh3_128": "32 hex"}}}
//                                      — a checksum of every other file of the directory,
//                                      hashed as it was written (runtime/io/file_checksum.h)
// A step directory without training_state.json is incomplete and never resumed from.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ops/tensor.h"
#include "runtime/model/config.h"
#include "runtime/io/safetensors.h"

namespace olmo2 {

/// Version written as "format_version" in training_state.json; load_training_state
/// refuses any other.
constexpr int kTrainingStateFormatVersion = 1;

/// Default largest model shard, in bytes (2 GiB).
constexpr int64_t kDefaultMaxShardBytes = int64_t{2} << 30;

/// What save_checkpoint writes. Views are not owned; they must outlive the call.
struct CheckpointContents {
  /// Written as config.json (its dtype is written as float32: the model tensors are).
  ModelConfig config;
  /// The model, in state-dict order, by HF name ("model.layers.0.mlp.up_proj.weight"):
  /// full unsharded, unpadded f32 tensors, contiguous, on any device (a device tensor is
  /// copied to the host as its bytes are written, one tensor at a time). The order
  /// decides the shards.
  std::vector<std::pair<std::string, TensorView>> model_tensors;
  /// Optimizer moments and any other tensors of the training state: contiguous views of
  /// any dtype on any device, written to training_state.safetensors.
  std::map<std::string, TensorView> state_tensors;
  /// Caller-defined state (step, scheduler, data cursor, RNG, …), any JSON value.
  nlohmann::json state = nlohmann::json::object();
  /// Optional: a file copied into the checkpoint as tokenizer.json ("" = none), with the
  /// tokenizer_config.json beside it when there is one (its roles and chat template).
  std::string tokenizer_file;
};

/// Name of the checkpoint directory of `step`: "step-" and 8 digits ("step-00000120").
std::string checkpoint_dir_name(int64_t step);

/// Writes the checkpoint of `step` to `save_dir/step-NNNNNNNN/` (layout above) and
/// returns that path, through a CheckpointWriter (checkpoint_writer.h) fed the views in
/// turn. `save_dir` is created when missing. Procedure: stale `save_dir/.tmp-step-*`
/// directories of a crashed save are removed; every file is written into
/// `save_dir/.tmp-step-<step>-<pid>/` and fsynced, then the directory, and it is renamed
/// into place (an existing checkpoint of the same step is atomically
/// exchanged with the new one, then removed), and `save_dir` is fsynced. Then only the
/// newest `keep` `step-NNNNNNNN` directories are kept (keep ≤ 0 keeps all; the one just
/// written is never removed; nothing else in `save_dir` is touched). Model shards hold
/// at most `max_shard_bytes` bytes of tensor data (a larger tensor gets a shard of its
/// own); one shard is written as model.safetensors.
///
/// Throws InputError before touching the disk for invalid contents (step outside
/// [0, 99999999], an empty model, an empty or repeated tensor name, a model tensor
/// that is not a contiguous f32 tensor, a state tensor that is not contiguous, an
/// unreadable tokenizer file, max_shard_bytes ≤ 0), InputError when
/// `save_dir` cannot be created, and Error naming the file and the OS reason when a
/// write, fsync or rename fails (e.g. disk full). On any error the temporary directory
/// is removed and the previous checkpoints are left as they were.
std::string save_checkpoint(const std::string& save_dir, int64_t step,
                            const CheckpointContents& contents, int keep,
                            int64_t max_shard_bytes = kDefaultMaxShardBytes);

/// Path of the complete checkpoint with the highest step in `save_dir`
/// ("save_dir/step-NNNNNNNN"), or "" when there is none or `save_dir` does not exist.
/// Only directories named `step-` + 8 digits that contain training_state.json count.
std::string latest_checkpoint(const std::string& save_dir);

/// Every complete checkpoint in `save_dir` (as latest_checkpoint counts them), newest
/// (highest step) first; empty when there is none or `save_dir` does not exist.
std::vector<std::string> complete_checkpoints(const std::string& save_dir);

/// The step a checkpoint directory's name stands for ("step-00000120" → 120, only the
/// last path component counts), or -1 when the name is not "step-" + 8 digits.
int64_t checkpoint_step_of(const std::string& dir);

/// The training state of a checkpoint, as written by save_checkpoint.
struct TrainingState {
  std::string dir;       ///< the checkpoint directory
  int64_t step = 0;      ///< the step it was saved at
  nlohmann::json state;  ///< CheckpointContents::state as saved
  /// training_state.safetensors, memory-mapped (CheckpointContents::state_tensors).
  std::unique_ptr<SafetensorsFile> tensors;

  bool has(const std::string& name) const { return tensors->tensors().count(name) != 0; }
  /// Copies state tensor `name` (stored as F32) into a new f32 tensor. Throws
  /// InputError naming the file and tensor when it is missing, not F32, or its shape
  /// differs from `expected`.
  Tensor load_f32(const std::string& name, const std::vector<int64_t>& expected) const;
};

/// Reads `checkpoint_dir/training_state.json` and maps
/// `checkpoint_dir/training_state.safetensors`. Throws InputError naming the file when
/// either is missing or unreadable, the JSON is invalid or lacks format_version / step
/// / state, the format version is not kTrainingStateFormatVersion, or the safetensors
/// file is invalid.
TrainingState load_training_state(const std::string& checkpoint_dir);

/// Test hook for crash safety: when `after_files` ≥ 0, every later save_checkpoint
/// stops with an Error after it has written (and fsynced) that many files of the new
/// checkpoint, before the rename, and — as a crash would — leaves its temporary
/// directory behind for the next save to remove. -1 (the default) disables the fault.
/// Not meant to be called while a save is running.
void set_checkpoint_fault_for_testing(int after_files);

}  // namespace olmo2
