// Data-parallel gradient buckets reduced while the backward runs (docs/architecture.md
// §7 "Overlap"): PyTorch DDP's bucketed all-reduce, Megatron-LM's overlap_grad_reduce.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/model/parameters.h"
#include "runtime/train/train_step.h"

namespace olmo2 {

/// Sums the gradients of `params` over the DP group in buckets of at most bucket_bytes.
///
/// Bucket order (docs/architecture.md §7 "Overlap"): the order the backward finishes the
/// units of this rank's stage — the tail (final norm, lm_head), the last layer, ..., the
/// first layer, the embedding — each unit's parameters in list order; that flat f32
/// sequence is cut into buckets of bucket_bytes / 4 elements (a tensor may span buckets,
/// small ones share one). The buckets, their sizes and their contents are the same with
/// and without overlap, and every bucket is reduced by the same call (MPI_Iallreduce), so
/// the sums are bit-identical either way.
///
/// As UnitHooks (with `overlap`): after_backward(u) counts unit u's backwards; at the
/// `micro_batches`-th its gradient is final, and each bucket whose units are all final is
/// packed into its own buffer and posted (Communicator::all_reduce_start). Every hook
/// call tests the oldest outstanding bucket, so that Open MPI, which advances a
/// non-blocking collective on a CPU only inside MPI calls, makes progress between units.
/// finish() posts what is left and waits for every bucket in order, copying the sums
/// back. Without `overlap` the hooks only count and finish() reduces every bucket with a
/// blocking all_reduce through one reused buffer (the memory of one bucket instead of a
/// copy of the gradients). Collective over dp in finish() and, with overlap, in
/// after_backward; every DP rank runs the same units in the same order.
/// Throws InputError for bucket_bytes < 4; CollectiveTimeout if a peer never joins.
class GradBuckets final : public UnitHooks {
 public:
  /// `layers`: the decoder layers of this rank's stage (hook units 1..layers);
  /// `micro_batches`: the backwards each unit runs in the step (≥ 1); `device`: the
  /// gradients' device. With `unit_order` false the buckets follow the parameter list
  /// instead (all_reduce_gradients; then nothing is posted before finish()).
  /// `storage` (optional, with overlap): a tensor the caller keeps from step to step that
  /// holds the bucket buffers (grown to the gradients' size when smaller), so that a step
  /// does not allocate and fault in a fresh copy of the gradients; null: allocated here.
  GradBuckets(std::vector<Parameter>& params, parallel::Communicator& dp, int64_t bucket_bytes, size_t layers,
              int64_t micro_batches, bool overlap, Device device, bool unit_order = true, Tensor* storage = nullptr);

  void before_forward(int) override { progress(); }
  void after_forward(int) override {}
  void before_backward(int) override { progress(); }
  void after_backward(int unit) override;
  Device device() const override { return device_; }

  /// Reduces every bucket not yet reduced and waits for all; afterwards each gradient
  /// holds its sum over dp. Call once, after the step's last backward.
  void finish() override;
  /// Buckets of the step.
  size_t buckets() const { return buckets_.size(); }
  /// Buckets posted before finish() (inside the backward).
  int64_t posted_early() const { return posted_early_; }

 private:
  struct Piece {
    int64_t at;       // offset in the bucket
    TensorView grad;  // the gradient's elements
  };
  struct Bucket {
    std::vector<Piece> pieces;
    int64_t size = 0;
    int waiting = 0;  // units of the bucket whose gradient is not final yet
    bool posted = false;
    int64_t offset = 0;  // in the flat sequence (and in the storage)
    TensorView buffer;   // with overlap, from post to finish: a view of storage_
    parallel::AsyncHandle handle;
  };
  void post(size_t b);
  void progress();

  parallel::Communicator& dp_;
  int64_t micro_batches_;
  bool overlap_;
  Device device_;
  std::vector<Bucket> buckets_;
  Tensor own_storage_;
  Tensor* storage_ = nullptr;
  std::vector<std::vector<size_t>> buckets_of_unit_;  // per hook unit: its buckets
  std::vector<int64_t> backwards_;                     // per hook unit: backwards seen
  size_t oldest_ = 0;                                  // first bucket that may be outstanding
  int64_t posted_early_ = 0;
};

}  // namespace olmo2
