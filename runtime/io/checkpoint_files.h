// The file list of a checkpoint directory and its verification (docs/architecture.md §7
// "Checkpoint integrity"): training_state.json's "files" names every other file of the
// directory with its size and XXH3-128; before any weight of a checkpoint is used, each
// listed file is read back in bounded chunks and compared. Under MPI the files are dealt
// over the ranks (storage is shared: docs/architecture.md §7 "Shared storage"), so no file is read twice.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace olmo2 {

/// One entry of training_state.json's "files".
struct ListedFile {
  std::string name;      ///< file name inside the checkpoint directory
  uint64_t bytes = 0;    ///< its size
  std::string xxh3_128;  ///< 32 lowercase hex digits
};

/// What a directory says about its own files.
struct FileListing {
  bool is_checkpoint = false;     ///< the directory has a training_state.json
  bool has_checksums = false;     ///< and it carries "files" (written by this version or later)
  std::vector<ListedFile> files;  ///< in name order; empty unless has_checksums
};

/// Reads `dir`/training_state.json's "files" (a plain model directory, without the file,
/// gives is_checkpoint = false). Throws InputError naming the file when it exists but
/// cannot be read, is not JSON, or "files" is not an object of {"bytes": non-negative
/// integer, "xxh3_128": 32 hex digits} entries whose names are plain file names.
FileListing read_file_listing(const std::string& dir);

/// Which share of the listed files one caller verifies: entry i when i % ranks == rank.
struct VerifyShare {
  int rank = 0;
  int ranks = 1;
  bool mine(size_t i) const { return static_cast<int>(i % static_cast<size_t>(ranks)) == rank; }
};

/// The files a loader of `dir` reads, which a list of checksums must cover: config.json,
/// training_state.safetensors (in a checkpoint), and model.safetensors, or the index and
/// every shard its weight_map names. Throws InputError naming the index when it is not
/// JSON or maps a tensor to something other than a plain file name.
std::vector<std::string> files_a_loader_reads(const std::string& dir);

/// When `listing` has checksums, first checks (on every share) that it lists every file
/// of files_a_loader_reads(dir) — else InputError "NAME is not in training_state.json's
/// \"files\"" — then streams this share's files of `listing` (checksum_file) and compares size and
/// XXH3-128 (generation_config.json and tokenizer_config.json excepted: the user's to edit, validated when read). Throws InputError on the first mismatch: "NAME: expected B bytes with
/// xxh3_128 H, found B' bytes with H'" (size first: a truncated file is named as such),
/// or naming a listed file that is missing or unreadable.
void verify_listed_files(const std::string& dir, const FileListing& listing, const VerifyShare& share = {});

/// The hook every loader of `--model DIR` calls before it maps a weight: when DIR is a
/// checkpoint with checksums, verifies this share of its files (as verify_listed_files);
/// a checkpoint without them gets one warning line on `warn` (when not null: give it on
/// one rank only) and is accepted; a plain model directory is accepted silently. Throws
/// InputError prefixed "--model DIR: ".
void verify_model_directory(const std::string& dir, const VerifyShare& share, std::ostream* warn);

}  // namespace olmo2
