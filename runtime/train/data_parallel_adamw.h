// AdamW for a data-parallel replica set, with its state optionally sharded over the DP
// group: ZeRO stages 1, 2 and 3 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
// Toward Training Trillion Parameter Models"; docs/architecture.md §7 "ZeRO stages").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/zero_units.h"

namespace olmo2 {

/// AdamW over this rank's parameters. Stage 0 (or dp null / of one rank) is AdamW.
/// Otherwise the parameters are cut into ZeRO units (make_zero_units) and DP rank r keeps
/// chunk r of each unit: the AdamW moments of its elements (stage ≥ 1), their gradient
/// (stage ≥ 2: filled by add_grad_chunk, the unit's reduce-scatter during the backward)
/// and their f32 master value (stage 3: the parameters' own tensors hold no storage,
/// see ZeroShards). AdamW is elementwise and every element is updated from the same
/// reduced gradient wherever it lives, so the chunking does not change the arithmetic.
class DataParallelAdamW {
 public:
  /// `params` must outlive the optimizer (its tensors are read and written by step).
  /// `dp` may be null (one replica); `stage` ≥ 1 with dp null or of size 1 is plain
  /// AdamW. Stage 3 starts with zero master chunks, which set_master fills unit by unit
  /// (the parameters' values need no storage until then). Throws InputError as AdamW
  /// does, or for a stage outside 0…3.
  DataParallelAdamW(std::vector<Parameter>& params, AdamWOptions options, parallel::Communicator* dp, int stage);
  ~DataParallelAdamW();

  /// One AdamW update of every parameter from its (already reduced and clipped)
  /// gradient with learning rate `lr`: stage 1 reads the gradients of `params`, stages
  /// 2 and 3 the gradient chunks. Stages 1 and 2 then all-gather each unit's updated
  /// chunks over dp into the parameters (collective); stage 3 keeps the chunks only.
  void step(double lr);

  /// Steps taken.
  int64_t steps() const;

  /// Every moment of this rank's parameters, whole (the parameter's local shape), named
  /// "exp_avg.<name>" / "exp_avg_sq.<name>" as AdamW::state_tensors names them. Sharded:
  /// assembled by one all-gather over dp per unit and moment kind: collective.
  std::map<std::string, Tensor> full_state() const;

  /// Moment `kind` ("exp_avg." or "exp_avg_sq.") of params[index], whole (the
  /// parameter's local shape, f32, on the parameters' device), for a streamed save.
  /// Unsharded the live moment itself (no copy; `keep` untouched). Sharded collective
  /// over dp (every DP rank calls it for the same parameter, in the same order): the
  /// ranks whose chunks hold pieces of it send them to DP rank 0, which assembles it in
  /// `keep` and returns keep's view; the other ranks get an empty view. Error for an
  /// unknown kind or an index out of range.
  TensorView moment(const std::string& kind, size_t index, Tensor& keep) const;

  /// The f32 value of params[index] for a streamed save: below stage 3 the parameter's
  /// own tensor; at stage 3 assembled from the master chunks on DP rank 0 as `moment`
  /// does (collective over dp; other ranks get an empty view).
  TensorView value(size_t index, Tensor& keep) const;

  /// Sets the moments from `load(moment name, parameter)`, which returns the moment of
  /// the parameter's local shape (f32), and the step count. Each rank keeps what it
  /// owns. Throws what `load` throws, InputError for a wrong shape or steps < 0.
  void restore(const std::function<Tensor(const std::string&, const Parameter&)>& load, int64_t steps);

  bool sharded() const { return stage_ >= 1; }
  /// The ZeRO stage in effect: 0 when unsharded.
  int stage() const { return stage_; }
  const std::vector<ZeroUnit>& units() const { return units_; }
  /// This rank's chunk pieces as 1-D parameters (the flags of their parameters; names
  /// "<name>@<first element>"): at stages 2 and 3 the gradients the step reads, which
  /// the grad norm, clipping and zeroing act on. Empty when unsharded.
  std::vector<Parameter>& chunk_parameters() { return seg_params_; }

  /// Writes this rank's chunk of unit `unit`'s values into `out` ([chunk], f32 or bf16 —
  /// rounded to nearest even —, zero padding past the unit's end): what a stage-3
  /// all-gather sends. ShapeError for a wrong size.
  void pack_values(size_t unit, const TensorView& out) const;
  /// Stage 3: copies this rank's chunk of unit `unit`'s parameter values (which must hold
  /// storage now) into its master chunk — how the start-up initialises or loads the
  /// model one unit at a time (docs/architecture.md §7 "ZeRO stages"). Error at another
  /// stage.
  void set_master(size_t unit);
  /// Adds `piece` ([n] f32, elements [at, at + n) of this rank's part of the unit's
  /// reduce-scattered gradient) into the gradient chunk of unit `unit` (stages 2 and 3).
  /// ShapeError when the piece runs past the chunk.
  void add_grad_chunk(size_t unit, const TensorView& piece, int64_t at = 0);
  /// Bytes this rank holds in chunk values, chunk gradients and moments (stage 1 counts
  /// its staging copies of values and gradients too, stage 2 its values, which exist
  /// only during step); for tests of the sharding.
  int64_t chunk_bytes() const;

 private:
  /// Unit u's chunk of this rank (`segment(k)` for its segments) all-gathered over dp into
  /// [chunk · dp] (rank r's chunk at r·chunk).
  Tensor gather_unit(size_t u, const std::function<TensorView(size_t)>& segment) const;
  /// Segment k's elements of its parameter's value into its chunk value.
  void copy_value_in(size_t k);
  /// params[index] whole on DP rank 0 from the chunk pieces `segment(k)` of every rank.
  TensorView assemble(size_t index, Tensor& keep, const std::function<TensorView(size_t)>& segment) const;
  std::vector<Parameter>& params_;
  parallel::Communicator* dp_ = nullptr;
  int stage_ = 0;
  Device device_ = Device::CPU;    ///< the parameters' device: the chunks and moments live there
  std::vector<ZeroUnit> units_;
  std::vector<size_t> seg_begin_;  ///< units_[u]'s first segment in the flat segment list
  std::vector<ZeroSegment> segments_;  ///< every unit's `mine`, in order
  std::vector<Tensor> seg_values_, seg_grads_;
  std::vector<Parameter> seg_params_;  ///< the chunk's pieces as 1-D parameters
  std::unique_ptr<AdamW> adam_;
};

}  // namespace olmo2
