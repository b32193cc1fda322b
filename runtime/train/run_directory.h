// The run directory of `olmo2 train` (--save-dir): created and locked for the whole run,
// refused when it holds another run's checkpoints; which checkpoint `--resume` continues;
// where each checkpoint copies tokenizer.json from (docs/architecture.md §7 training
// semantics: checkpoints and exact resume). World rank 0 alone touches the directory.
#pragma once

#include <string>
#include <vector>

namespace olmo2 {

/// The lock on a run's save directory, held from lock() until destruction, and the
/// tokenizer file its checkpoints copy. Not copyable (it owns the lock's descriptor).
class RunDirectory {
 public:
  RunDirectory() = default;
  /// Releases the lock (closes save_dir/.lock), if lock() took it.
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  /// The checkpoints `--resume` may continue, in the order to try them: for "auto" the
  /// newest complete checkpoint in `save_dir` (none when it has none yet: the run starts
  /// at step 0), for a directory that directory, for "" none. With `fallback`
  /// (--resume-fallback) the older complete checkpoints follow, newest first: for "auto"
  /// every other one of `save_dir`, for a directory named step-NNNNNNNN those of its
  /// parent with a lower step. Throws InputError when a named directory does not exist.
  /// Reads the file system: call it on world rank 0, which broadcasts the answer, so
  /// that every rank tries the same checkpoints.
  static std::vector<std::string> resume_candidates(const std::string& resume, const std::string& save_dir,
                                                    bool fallback);

  /// Creates `save_dir` (and its parents), takes an exclusive, non-blocking flock on
  /// save_dir/.lock for as long as this object lives (so two runs can never write the
  /// same checkpoints), and refuses a directory that already holds checkpoints unless
  /// `resume_dir` is one of them (a fresh run must not prune or interleave with another
  /// run's steps). Throws InputError naming the directory when it cannot be created, the
  /// lock file cannot be opened, another process holds the lock, or it holds another
  /// run's checkpoints.
  void lock(const std::string& save_dir, const std::string& resume_dir);

  /// Chooses where checkpoints copy tokenizer.json from (so that `olmo2 generate
  /// --prompt` works on any of them): `tokenizer` (--tokenizer) when given, else the
  /// tokenizer.json of `from` (the checkpoint or model the run continues, "" for none)
  /// when it has one, else none. Reads the file system; throws nothing.
  void choose_tokenizer_source(const std::string& tokenizer, const std::string& from);

  /// After a checkpoint was written to `path`: without --tokenizer, later checkpoints
  /// copy this one's tokenizer.json, as older checkpoints (the previous source) may be
  /// pruned by --keep. Throws nothing.
  void checkpoint_written(const std::string& path);

  /// The file checkpoints copy as tokenizer.json ("" = none).
  const std::string& tokenizer_source() const { return tokenizer_source_; }

 private:
  int lock_fd_ = -1;              ///< flock on save_dir/.lock, held for the run
  std::string tokenizer_source_;  ///< tokenizer.json copied into checkpoints ("" = none)
  bool tokenizer_given_ = false;  ///< --tokenizer: the source never moves
};

}  // namespace olmo2
