// Whole tensors assembled on one rank one at a time, from the slices the ranks of a
// (tp, pp, dp) run hold: what a distributed checkpoint save streams to its writer
// (docs/architecture.md §7 "Checkpoint writing at scale"). No rank holds more than one
// gathered tensor (and one received slice) at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "parallel/communicator.h"
#include "runtime/model/parameters.h"

namespace olmo2 {

/// One tensor a rank holds a slice of, for stream_whole_tensors.
struct StreamedSlice {
  std::string name;        ///< name of the whole tensor ("exp_avg.model.norm.weight")
  const Parameter* param;  ///< its sharding and local shape (the value is not read)
  /// The slice's data (f32, contiguous, the parameter's local shape, any device), asked
  /// for once when its turn comes; `keep` may hold it. Called on every rank that lists
  /// the slice, contributing or not, in the stream's order: it may be a collective over
  /// a group whose ranks all list the same names (the ZeRO-1 moments over DP). A rank
  /// that does not contribute may get an empty view.
  std::function<TensorView(Tensor& keep)> data;
};

/// Where the slices of one whole tensor lie, as root learns it from the contributors.
struct SlicePiece {
  int rank = 0;                      ///< world rank that sends it
  std::vector<int64_t> full_shape;   ///< the whole tensor's shape, as that rank sees it
  std::vector<int64_t> local_shape;  ///< the slice's shape
  int shard_dim = -1;
  int64_t shard_begin = 0, shard_end = 0;
};

/// Every contributing rank sends root the names and shardings of its slices (one JSON
/// list each, over `world`); returns on root, by name, the pieces in rank order; empty
/// elsewhere. Collective over `world`. CollectiveTimeout when a peer never answers.
std::map<std::string, std::vector<SlicePiece>> gather_slice_layouts(const std::vector<StreamedSlice>& slices,
                                                                    bool contribute, parallel::Communicator& world,
                                                                    int root = 0);

/// The whole shape of `name` from its pieces. Error when there is none ("no rank sent")
/// or two ranks disagree on it.
std::vector<int64_t> whole_shape(const std::string& name, const std::vector<SlicePiece>& pieces);

/// For each name of `order` in turn: every rank that lists a slice of it asks for its
/// data; contributors send it to root (a device slice staged to the host first); root
/// copies each piece (`layouts`, from gather_slice_layouts) into a zero f32 tensor of the
/// whole shape, calls `consume(name, whole)` and frees it. The order must be the same on
/// every rank; each rank's slices not in it are skipped. An exception from `consume` is
/// held: root goes on receiving (and consumes nothing more) so that no sender is left
/// waiting, then rethrows it. Collective over `world`. Error on root for a name it has
/// no layout of; CollectiveTimeout when a peer never answers.
void stream_whole_tensors(const std::vector<std::string>& order, const std::vector<StreamedSlice>& slices,
                          bool contribute, const std::map<std::string, std::vector<SlicePiece>>& layouts,
                          parallel::Communicator& world, int root,
                          const std::function<void(const std::string&, const TensorView&)>& consume);

}  // namespace olmo2
