// Moving parameter-shaped tensors between the sharded layout of a (tp, pp, dp) run and
// whole Hugging Face tensors: what a distributed checkpoint writes and what a resume in
// any layout reads (docs/architecture.md §7 "Checkpoints").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "parallel/communicator.h"
#include "runtime/model/parameters.h"

namespace olmo2 {

/// The HF state-dict names of every parameter of `config`, in the order transformers
/// writes them (see list_parameters) — the order a checkpoint's tensors are written in.
std::vector<std::string> parameter_names(const ModelConfig& config);

/// Copies this rank's slice of a parameter out of the whole tensor `full` (f32,
/// p.full_shape) into `local` (f32, the parameter's local shape): rows or columns
/// [shard_begin, shard_end) of dimension shard_dim; vocab padding rows are set to 0.
/// ShapeError when a shape does not fit.
void copy_from_full(const Parameter& p, const TensorView& full, const TensorView& local);

/// The inverse: writes `local` into its place in `full`, dropping padding rows.
void copy_to_full(const Parameter& p, const TensorView& local, const TensorView& full);

/// One tensor a rank contributes to a gather: a parameter-shaped slice with the
/// parameter's sharding (p's value tensor is not read, only its shape and sharding).
struct SliceToGather {
  std::string name;        ///< name of the whole tensor ("exp_avg.model.norm.weight")
  const Parameter* param;  ///< the sharding and local shape
  TensorView data;         ///< the slice: f32, contiguous, the parameter's local shape
};

/// Assembles whole tensors on world rank `root`: every rank with `contribute` set sends
/// its slices (a JSON list of names and shardings, then the data, over `world`) and root
/// copies each into a zero tensor of the full shape, in the order the slices arrive
/// (root's own, then ranks in order). Returns (name, tensor) on root, in first-seen
/// order; nothing on other ranks. Collective over `world`: every rank calls it, each
/// sender's slices in the same order as its parameters. Error when two ranks send
/// different full shapes for one name; CollectiveTimeout when a peer never answers.
std::vector<std::pair<std::string, Tensor>> gather_whole_tensors(const std::vector<SliceToGather>& slices,
                                                                 bool contribute, parallel::Communicator& world,
                                                                 int root = 0);

}  // namespace olmo2
