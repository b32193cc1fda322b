// Deterministic data loader over .npy token files (docs/architecture.md §7 "Data").
//
// Windows: file i of n_i tokens is cut into floor(n_i / seq_len) non-overlapping
// windows of seq_len tokens (its tail dropped); the windows of all files are numbered
// in file order. A window's input_ids are its tokens; its labels are the same tokens
// shifted left by one, the last label -100 (ignored), as OLMo-core builds them.
//
// Order: epoch e visits the windows in the order window_permutation(num_windows,
// seed, e). Step s of an epoch is the global batch of permutation entries
// [s·G, (s+1)·G) for G = global_batch; an epoch has floor(num_windows / G) steps (the
// remainder is dropped), then the next epoch starts. The order depends only on the
// files, seq_len, G and the seed, never on the parallel layout: DP rank r of dp_size
// takes the contiguous share [r·G/dp_size, (r+1)·G/dp_size) of the step's batch and
// splits it into micro-batches.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/io/npy.h"

namespace olmo2 {

/// Label value of a position that carries no target (cross-entropy ignores it).
constexpr int32_t kIgnoreIndex = -100;

/// How the token files are cut and ordered.
struct DataLoaderOptions {
  int64_t seq_len = 0;       ///< tokens per window (> 0)
  int64_t global_batch = 0;  ///< windows per optimizer step, over all DP ranks (> 0)
  uint64_t seed = 0;         ///< seeds the per-epoch order
  int64_t vocab_size = 0;    ///< every token id must be < vocab_size (1 … 2^31)
};

/// One training sequence.
struct Sample {
  std::vector<int32_t> input_ids;  ///< [seq_len] token ids
  std::vector<int32_t> labels;     ///< [seq_len] input_ids shifted left by one, last = -100
  int64_t window = 0;              ///< global window index (file order)
};

/// Where the loader stands; saved in checkpoints to resume the exact same order.
/// `seed`, `seq_len`, `global_batch` and `num_windows` identify the data order and
/// must match the loader's on restore.
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  uint64_t seed = 0;
  int64_t seq_len = 0;
  int64_t global_batch = 0;
  int64_t num_windows = 0;  ///< total windows of the files (guards against changed data)
};

/// What one token file held when the loader read it: recorded in checkpoints, so that a
/// resume runs on the data it was trained on, and compared across ranks
/// (docs/architecture.md §7 "Data").
struct DataFileIdentity {
  std::string path;   ///< as given to --data (another path may hold the same file)
  int64_t tokens = 0; ///< token count
  std::string xxh3;   ///< XXH3-128 of its token ids as uint32 little-endian, 32 hex digits
  bool operator==(const DataFileIdentity&) const = default;
};

/// {"path", "tokens", "xxh3"}, and back (InputError naming a missing or mistyped field).
void to_json(nlohmann::json& j, const DataFileIdentity& f);
void from_json(const nlohmann::json& j, DataFileIdentity& f);

/// {"epoch", "step_in_epoch", "seed", "seq_len", "global_batch", "num_windows"}.
void to_json(nlohmann::json& j, const DataLoaderState& s);
/// Inverse of to_json. Throws InputError naming a missing field or one that is not
/// an integer of the right sign.
void from_json(const nlohmann::json& j, DataLoaderState& s);

/// The visiting order of `n` windows in `epoch`: a permutation of 0 … n-1.
/// Algorithm (fixed, so any platform and compiler give the same order):
///  - generator: splitmix64 (Steele, Lea, Flood 2014): state += 0x9e3779b97f4a7c15,
///    output = mix(state) with mix(z) = z ^= z>>30, z *= 0xbf58476d1ce4e5b9,
///    z ^= z>>27, z *= 0x94d049bb133111eb, z ^= z>>31; initial state
///    mix(mix(seed) + epoch);
///  - bounded draw in [0, m): Lemire's multiply-shift with rejection (unbiased):
///    x = next, p = x·m as 128 bits, redraw while low64(p) < (2^64 - m) mod m,
///    result = high64(p);
///  - Fisher–Yates: start from the identity, for i = n-1 down to 1 swap entries i
///    and draw(i + 1).
/// Throws InputError when n ≥ 2^32 (entries are stored as uint32), naming n.
std::vector<uint32_t> window_permutation(uint64_t n, uint64_t seed, int64_t epoch);

/// Memory-maps token files and serves the windows of each step in a seeded order
/// that is the same for every parallel layout. batch() is const and may be called
/// from several threads; advance() and restore() may not run concurrently with it.
class DataLoader {
 public:
  /// Opens every file (NpyFile) and positions the loader at epoch 0, step 0.
  /// Throws InputError when: `files` is empty; an option is out of range (named);
  /// a file is missing or not a valid '<u4'/'<u2' .npy file (see NpyFile); a file has
  /// fewer tokens than one window ("file X has N tokens, fewer than one window of
  /// seq_len T"); global_batch exceeds the total number of windows. Token ids are
  /// checked against vocab_size when a window is read, not here.
  DataLoader(const std::vector<std::string>& files, DataLoaderOptions options);

  /// The windows of the current step for one DP rank and micro-batch: the step's
  /// global batch is split into dp_size contiguous shares of G/dp_size windows, each
  /// into micro-batches of micro_batch_size; this returns micro-batch
  /// `micro_batch_index` of share `dp_rank`, micro_batch_size samples in order.
  /// Throws InputError when G % (dp_size · micro_batch_size) != 0 (naming G, dp_size
  /// and micro_batch_size), when dp_rank or micro_batch_index is out of range, or
  /// when a token id is ≥ vocab_size (naming file, token offset, id and vocab size).
  std::vector<Sample> batch(int64_t dp_rank, int64_t dp_size, int64_t micro_batch_index,
                            int64_t micro_batch_size) const;

  /// Reads window `index` (0 ≤ index < num_windows(), else ShapeError). Throws
  /// InputError on a token id ≥ vocab_size, as batch() does.
  Sample window(int64_t index) const;

  /// Reads every token of every file once and throws InputError naming the file,
  /// offset and id of the first id ≥ vocab_size — so a bad token is refused before
  /// training starts rather than when its batch comes up — and returns each file's
  /// identity (its tokens' XXH3-128, computed in the same pass), in file order. Reads in
  /// blocks; O(tokens).
  std::vector<DataFileIdentity> check_token_ids() const;

  /// Moves to the next step; after the last step of an epoch, to step 0 of the next
  /// epoch (whose order is computed then).
  void advance();

  DataLoaderState state() const;
  /// Resumes at `s`. Throws InputError when its seed, seq_len, global_batch or
  /// num_windows differ from this loader's (naming the field and both values), or
  /// when epoch < 0 or step_in_epoch is outside [0, steps_per_epoch()).
  void restore(const DataLoaderState& s);

  int64_t num_windows() const { return static_cast<int64_t>(window_start_.back()); }
  /// Optimizer steps per epoch: floor(num_windows / global_batch).
  int64_t steps_per_epoch() const { return num_windows() / options_.global_batch; }
  int64_t epoch() const { return epoch_; }
  int64_t step_in_epoch() const { return step_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  std::vector<NpyFile> files_;
  std::vector<uint64_t> window_start_;  ///< first global window of each file, then the total
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
  int64_t step_ = 0;
  std::vector<uint32_t> order_;  ///< window_permutation of the current epoch
};

}  // namespace olmo2
