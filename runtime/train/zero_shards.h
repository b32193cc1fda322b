// ZeRO stages 2 and 3 during the forward and backward: each unit's gradient
// reduce-scattered over DP after its backward, and (stage 3) each unit's weights
// all-gathered before its forward and backward and freed after (docs/architecture.md §7
// "ZeRO stages").
#pragma once

#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <memory>
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
///
/// Stage 3 prefetches (PyTorch FSDP's forward and backward prefetch): before_forward(u)
/// completes u's all-gather (posting it if it was not) and then posts the all-gather of
/// the next unit of this rank in forward order; before_backward(u) likewise in backward
/// order (layers down to the first; the embedding's backward reads no weights). So while
/// a unit computes, the next one's gather is in flight (Communicator::all_gather_start),
/// and at most two units' weights exist at once: the current one and the next. Every
/// prefetch is consumed within its pass (a pass's last unit posts none; the last stage
/// runs each micro-batch's backward right after its forward).
///
/// With `overlap` (--overlap on, docs/architecture.md §7 "Overlap") after_backward(u) posts
/// u's gradient reduce-scatter pieces (Communicator::reduce_scatter_start) with at most two
/// in flight (posting one completes all but the newest before it), and leaves u's last
/// piece in flight while the next unit's backward computes; finish() completes it.
/// Completed in the order posted, each adds its sums into the optimizer's chunk in the same
/// order as without overlap: the same bits. The cost: the unit's flat gradient lives until
/// its last piece completes (one unit longer), and a second piece's buffers. Without
/// overlap every piece is waited for before the next is posted.
class ZeroShards final : public UnitHooks {
 public:
  /// `params`: the parameters the optimizer was built over, their gradients shape_only
  /// (zero_startup.h), and at stage 3 their values too; `compute[i]`: the tensor the
  /// model computes with for params[i] (its value itself in fp32, the bf16 copy in bf16
  /// precision; shape_only at stage 3); `layers`: the rank's decoder layers;
  /// `bucket_bytes` (--grad-bucket-mb): the most a unit's gradient reduce-scatter sends in
  /// one call (its [dp, piece] send buffer; a unit within it is sent whole). Error when
  /// the optimizer is not at stage 2 or 3 or bucket_bytes < 1.
  ZeroShards(DataParallelAdamW& optimizer, std::vector<Parameter>& params, std::vector<Tensor*> compute,
             parallel::Communicator& dp, size_t layers, int64_t bucket_bytes, bool overlap = true);

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
  /// Completes the gradient reduce-scatters still in flight (with overlap).
  void finish() override;
  Device device() const override { return device_; }
  /// Gradient reduce-scatter pieces posted and not yet completed (0 between steps).
  size_t reductions_in_flight() const { return reducing_.size(); }

  /// Bytes of full unit tensors (gathered weights, the receive buffer of a gather in
  /// flight, unit gradients) alive now, and the most alive at once since construction.
  int64_t live_bytes() const { return live_; }
  int64_t peak_live_bytes() const { return peak_; }
  /// Stage 3: gathers posted ahead of their unit's use (prefetches) since construction.
  int64_t prefetched() const { return prefetched_; }
  /// Stage 3: units whose whole weights exist (gathered, or their gather in flight) now
  /// and at most at once since construction.
  int gathered_units() const { return units_now_; }
  int peak_gathered_units() const { return peak_units_; }
  /// Gathers posted and not yet completed (0 between passes).
  size_t in_flight() const { return in_flight_.size(); }
  /// Bytes the collectives of this object have moved on this rank since construction:
  /// the all-gathered wholes and the reduce-scattered wholes (buffer sizes, as
  /// TimedCommunicator counts them).
  int64_t sent_bytes() const { return sent_; }

 private:
  /// The optimizer's unit of hook unit `unit` (embedding 0, layer l at 1 + l, tail at
  /// 1 + layers); -1 when this rank has no such unit.
  int unit_of(int unit) const;
  /// The optimizer unit of the first hook unit after `unit` (forward) or before it, down
  /// to the first layer (backward), that this rank has; -1 when none.
  int next_unit(int unit, bool forward) const;
  /// Posts unit u's all-gather (stage 3) unless its weights are present or in flight;
  /// true when posted.
  bool post(size_t u);
  /// Makes unit u's weights present: completes its gather (posting it first if needed).
  void gather(size_t u);
  void release_weights(size_t u);
  /// Posts the reduce-scatter of unit u's flat gradient `whole` ([chunk · dp] f32) over DP
  /// in pieces of at most bucket_bytes_ (each completed by complete()).
  void reduce_scatter_grad(size_t u, Tensor whole);
  /// Waits for the oldest `count` pieces in flight, in order, adding this rank's sums into
  /// its gradient chunk.
  void complete(size_t count);
  /// Points unit u's compute tensors (grads: its gradients) at consecutive pieces of the
  /// 1-D `flat`, in parameter order, each keeping its shape; unlay makes them shape_only.
  void lay_out(size_t u, const Tensor& flat, bool grads);
  void unlay(size_t u, bool grads);
  void allocate(Tensor& t);
  void release(Tensor& t);
  void count(const Tensor& t, int sign);

  /// A posted all-gather of one unit: this rank's chunk, the whole, the pending handle.
  struct InFlight {
    Tensor mine, all;
    parallel::AsyncHandle handle;
  };

  /// A posted piece of a unit's gradient reduce-scatter: [at, at + n) of the unit's chunk.
  struct Reducing {
    size_t unit;
    int64_t at, n;
    std::shared_ptr<Tensor> whole;  // the unit's flat gradient (counted in live_ until its last piece)
    Tensor send, mine;              // this piece's [dp, n] send buffer (pieces only) and its sums
    parallel::AsyncHandle handle;
  };

  DataParallelAdamW& optimizer_;
  bool overlap_ = true;
  std::deque<Reducing> reducing_;
  std::vector<Parameter>& params_;
  std::vector<Tensor*> compute_;
  parallel::Communicator& dp_;
  int64_t bucket_bytes_ = 0;
  std::vector<int> unit_of_hook_;
  std::vector<bool> gathered_;  ///< per optimizer unit: weights present (stage 3)
  std::map<size_t, InFlight> in_flight_;  ///< per optimizer unit: its gather, posted
  /// Per optimizer unit in use: its gathered weights (stage 3) and its flat gradient,
  /// which the unit's compute and gradient tensors are views of.
  std::map<size_t, Tensor> whole_weights_, whole_grads_;
  Device device_ = Device::CPU;
  int64_t live_ = 0, peak_ = 0, sent_ = 0, prefetched_ = 0;
  int units_now_ = 0, peak_units_ = 0;
};

}  // namespace olmo2
