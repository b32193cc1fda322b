// AdamW for a data-parallel replica set, with its state optionally sharded over the DP
// group (ZeRO stage 1; Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/train/optimizer.h"

namespace olmo2 {

/// AdamW over this rank's parameters. Without sharding it is AdamW. With ZeRO-1 the
/// parameters' elements, taken in list order as one flat sequence of N floats, are cut
/// into dp equal chunks of ceil(N / dp); DP rank r keeps the moments of chunk r only
/// (memory ÷ dp), updates those elements, and one all-gather over `dp` gives every
/// replica every updated element. AdamW is elementwise and every replica holds the same
/// (all-reduced) gradients, so both give bit-identical parameters.
class DataParallelAdamW {
 public:
  /// `params` must outlive the optimizer (its tensors are read and written by step).
  /// `dp` may be null (one replica); `zero1` with dp null or of size 1 is plain AdamW.
  /// Throws InputError as AdamW does.
  DataParallelAdamW(std::vector<Parameter>& params, AdamWOptions options, parallel::Communicator* dp, bool zero1);
  ~DataParallelAdamW();

  /// One AdamW update of every parameter from its (already reduced and clipped)
  /// gradient with learning rate `lr`. With ZeRO-1 collective over dp (one all-gather).
  void step(double lr);

  /// Steps taken.
  int64_t steps() const;

  /// Every moment of this rank's parameters, whole (the parameter's local shape), named
  /// "exp_avg.<name>" / "exp_avg_sq.<name>" as AdamW::state_tensors names them. With
  /// ZeRO-1 assembled by one all-gather over dp per moment kind: collective, every DP
  /// rank calls it.
  std::map<std::string, Tensor> full_state() const;

  /// Moment `kind` ("exp_avg." or "exp_avg_sq.") of params[index], whole (the
  /// parameter's local shape, f32, on the parameters' device), for a streamed save.
  /// Without ZeRO-1 the live moment itself (no copy; `keep` untouched). With ZeRO-1
  /// collective over dp (every DP rank calls it for the same parameter, in the same
  /// order): the ranks whose chunks hold pieces of it send them to DP rank 0, which
  /// assembles it in `keep` and returns keep's view; the other ranks get an empty view.
  /// Error for an unknown kind or an index out of range.
  TensorView moment(const std::string& kind, size_t index, Tensor& keep) const;

  /// Sets the moments from `load(moment name, parameter)`, which returns the moment of
  /// the parameter's local shape (f32), and the step count. Each rank keeps what it
  /// owns. Throws what `load` throws, InputError for a wrong shape or steps < 0.
  void restore(const std::function<Tensor(const std::string&, const Parameter&)>& load, int64_t steps);

  bool sharded() const { return zero1_; }

 private:
  /// This rank's chunk (its segments' `segment(k)` views, [count] each, in order) as one
  /// [chunk] tensor, all-gathered over dp into [chunk · dp] (rank r's chunk at r·chunk).
  Tensor gather_chunks(const std::function<TensorView(size_t)>& segment) const;
  struct Segment {
    size_t param;    ///< index in params_
    int64_t begin;   ///< first local element of that parameter
    int64_t count;
  };
  std::vector<Parameter>& params_;
  parallel::Communicator* dp_ = nullptr;
  bool zero1_ = false;
  int64_t total_ = 0, chunk_ = 0;  ///< N and ceil(N / dp)
  Device device_ = Device::CPU;    ///< the parameters' device: the chunks and moments live there
  std::vector<Segment> segments_;  ///< this rank's chunk, as pieces of parameters
  std::vector<Tensor> seg_values_, seg_grads_;
  std::vector<Parameter> seg_params_;  ///< the chunk's pieces as 1-D parameters
  std::unique_ptr<AdamW> adam_;
};

}  // namespace olmo2
