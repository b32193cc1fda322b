// Whether a checkpoint can be trusted before a resume uses it (docs/architecture.md §7
// "Checkpoint integrity"): every listed file's size and XXH3-128, then the training state
// against itself and the model — step, data-loader position, each tensor's shape and
// dtype, no non-finite value in the weights or the AdamW moments.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/io/checkpoint_files.h"

namespace olmo2 {

/// Verifies the checkpoint `dir` (a directory save_checkpoint wrote) in this order:
///  1. the files training_state.json lists (verify_listed_files; this share only); a
///     checkpoint without "files" gets one warning line on `warn` (when not null) and
///     passes this step;
///  2. training_state.json: readable (load_training_state), its step equal to the
///     directory's ("step-NNNNNNNN"; another name is not checked) and to state.step;
///  3. state.data_loader: global_batch ≥ 1, num_windows ≥ global_batch, epoch ≥ 0,
///     0 ≤ step_in_epoch < ⌊num_windows / global_batch⌋ and epoch·⌊num_windows /
///     global_batch⌋ + step_in_epoch = step (the loader moves on once per step);
///  4. every parameter of the checkpoint's config.json in the model files with that
///     config's shape and dtype, and its exp_avg.NAME / exp_avg_sq.NAME in
///     training_state.safetensors as F32 of the same shape;
///  5. no NaN or infinity in the weights or moments (this share of the tensors: tensor i
///     of the list parameters-then-moments when i % ranks == rank).
/// Throws InputError "checkpoint DIR: …" naming the file or tensor at fault: for step 5
/// the tensor, the value and its first flat index. Reads every byte of this share once
/// for the checksums and the tensors once more (the page cache usually serves the second).
void verify_checkpoint(const std::string& dir, const VerifyShare& share, std::ostream* warn);

/// The checkpoint a resume continues: the first of `candidates` (RunDirectory::
/// resume_candidates, the same list on every rank) that passes verify_checkpoint, each
/// tried by every rank of `world` (null: one process) on its share inside one
/// parallel::agree, so that every rank reaches the same verdict. Without `fallback` only
/// the first is tried. A skipped checkpoint is logged by rank 0 on stderr, with why.
/// Returns "" for no candidates. Throws InputError (under MPI parallel::AgreedError, on
/// every rank) naming the failing file: without `fallback` with the advice to give
/// --resume-fallback, with it when no candidate passes.
std::string first_verified_checkpoint(const std::vector<std::string>& candidates, bool fallback,
                                      parallel::Communicator* world);

}  // namespace olmo2
