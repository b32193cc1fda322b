// The file-system steps of a checkpoint save (docs/architecture.md §7 "Checkpoints"):
// files written with every OS error reported and every byte hashed, fsyncs, the removal
// of what crashed saves left, the atomic install of a finished directory, retention.
// CheckpointWriter (checkpoint_writer.h) drives them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/io/file_checksum.h"

namespace olmo2 {

/// Prefix of a save's temporary directory: `.tmp-step-<8 digits>-<pid>`.
constexpr char kCheckpointTmpPrefix[] = ".tmp-step-";
/// Suffix of a checkpoint set aside while its re-save is moved in (`<tmp>-old`).
constexpr char kCheckpointAsideSuffix[] = "-old";

/// A file written with POSIX calls so that every failure (ENOSPC, EIO) is reported with
/// its errno; close() fsyncs before closing; destroying an open writer just closes it.
/// Every byte written is also hashed, for training_state.json's "files".
class HashedFileWriter {
 public:
  /// Creates (truncates) `path`. Error naming it and the OS reason when it cannot.
  explicit HashedFileWriter(std::string path);
  HashedFileWriter(const HashedFileWriter&) = delete;
  HashedFileWriter& operator=(const HashedFileWriter&) = delete;
  ~HashedFileWriter();
  /// Appends `n` bytes. Error naming the file and the OS reason on failure.
  void write(const void* data, size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  /// Size and XXH3-128 of everything written so far.
  FileChecksum checksum() const { return {hash_.bytes(), hash_.hex()}; }
  /// fsync, then close. Error naming the file and the OS reason on failure.
  void close();

 private:
  std::string path_;
  int fd_ = -1;
  Xxh3Stream hash_;
};

/// fsyncs directory `dir`. Error naming it and the OS reason on failure.
void fsync_directory(const std::string& dir);

/// Writes `text` to `path` (fsynced) and returns its checksum. Error as HashedFileWriter.
FileChecksum write_text_file(const std::string& path, const std::string& text);

/// Copies `from` to `to` (fsynced) and returns the copy's checksum. InputError when
/// `from` cannot be opened; Error naming the file on a failed read or write.
FileChecksum copy_file_hashed(const std::string& from, const std::string& to);

/// Removes what crashed saves left in `save_dir`: temporary directories, and an old
/// checkpoint set aside for a re-save (put back when its new version never arrived).
/// Failures to remove are reported on stderr, not thrown.
void remove_stale_saves(const std::string& save_dir);

/// Moves the complete directory `tmp` to `final_path`; an existing one is exchanged
/// atomically (renameat2 RENAME_EXCHANGE) or, where the file system cannot, set aside as
/// `aside` first. Error naming the paths and the OS reason when a rename fails.
void install_checkpoint_dir(const std::string& tmp, const std::string& final_path, const std::string& aside);

/// Keeps the newest `keep` `step-NNNNNNNN` directories of `save_dir` and `current`'s
/// (keep ≤ 0 keeps all); failures to remove are reported on stderr, not thrown.
void prune_checkpoints(const std::string& save_dir, int keep, int64_t current);

}  // namespace olmo2
