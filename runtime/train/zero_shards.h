// ZeRO stages 2 and 3 during the forward and backward: each unit's gradient
// reduce-scattered over DP after its backward, and (stage 3) each unit's weights
// all-gathered before its forward and backward and freed after (docs/architecture.md §7
// "ZeRO stages").
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/train/data_parallel_adamw.h"
#include "runtime/train/train_step.h"

namespace olmo2 {

/// The UnitHooks of a ZeRO stage-2 or stage-3 step over the chunks `optimizer` holds.
/// A unit's full tensors (its gathered weights, its gradient) exist only between a
/// before_* and the matching after_* call; at other times the parameters' tensors keep
/// their shape, dtype and device but hold no storage (a null view). Collective over dp
/// in every call that moves data (every DP rank runs the same units in the same order).
class ZeroShards final : public UnitHooks {
 public:
  /// `params`: the parameters the optimizer was built over, their gradients shape_only
  /// (zero_startup.h), and at stage 3 their values too; `compute[i]`: the tensor the
  /// model computes with for params[i] (its value itself in fp32, the bf16 copy in bf16
  /// precision; shape_only at stage 3); `layers`: the rank's decoder layers. Error when
  /// the optimizer is not at stage 2 or 3.
  ZeroShards(DataParallelAdamW& optimizer, std::vector<Parameter>& params, std::vector<Tensor*> compute,
             parallel::Communicator& dp, size_t layers);

  /// Stage 3's start-up, one unit at a time (docs/architecture.md §7 "ZeRO stages"): the
  /// unit's f32 values are allocated, `fill(p)` writes each of its parameters' value
  /// (init_parameter, or load_parameter from a checkpoint), the optimizer copies this
  /// rank's chunk into its master chunk (set_master) and the values are freed again — no
  /// more than one unit's values exist at once. Local (no communication); throws what
  /// `fill` throws; Error at stage 2.
  void fill_master(const std::function<void(const Parameter&)>& fill);

  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;
  Device device() const override { return device_; }

  /// Bytes of full unit tensors (gathered weights, unit gradients) alive now, and the
  /// most alive at once since construction.
  int64_t live_bytes() const { return live_; }
  int64_t peak_live_bytes() const { return peak_; }
  /// Bytes the collectives of this object have moved on this rank since construction:
  /// the all-gathered wholes and the reduce-scattered wholes (buffer sizes, as
  /// TimedCommunicator counts them).
  int64_t sent_bytes() const { return sent_; }

 private:
  /// The optimizer's unit of hook unit `unit` (embedding 0, layer l at 1 + l, tail at
  /// 1 + layers); -1 when this rank has no such unit.
  int unit_of(int unit) const;
  void gather(size_t u);
  void release_weights(size_t u);
  void allocate(Tensor& t);
  void release(Tensor& t);

  DataParallelAdamW& optimizer_;
  std::vector<Parameter>& params_;
  std::vector<Tensor*> compute_;
  parallel::Communicator& dp_;
  std::vector<int> unit_of_hook_;
  std::vector<bool> gathered_;  ///< per optimizer unit: weights present (stage 3)
  Device device_ = Device::CPU;
  int64_t live_ = 0, peak_ = 0, sent_ = 0;
};

}  // namespace olmo2
