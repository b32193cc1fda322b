// The Prometheus metrics of `olmo2 train` (--metrics-port): the endpoint, taken before
// any work so that a port in use stops every rank; which ranks each endpoint serves; the
// peak FLOP/s that MFU is measured against; and, at each step boundary, the gathering of
// every rank's step time and of the per-layer diagnostics (docs/architecture.md §9
// metrics; §6 communicators for the groups each value is reduced over).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "monitoring/train_metrics.h"
#include "parallel/process_groups.h"
#include "runtime/model/model.h"
#include "runtime/model/parameters.h"
#include "runtime/train/step_record.h"
#include "runtime/train/train_options.h"
#include "runtime/io/port_file.h"
#include "runtime/train/train_step.h"

namespace olmo2 {

/// The metrics side of one training run, on every rank of the job. Without
/// --metrics-port it does nothing. With it, every rank takes part in its collectives
/// (in the same order, at the same step boundaries) and the ranks that serve an
/// endpoint — world rank 0, or each node's first rank with --metrics-per-node — publish
/// the values; a scrape only reads what is already there.
class MetricsReporter {
 public:
  /// Takes host:port on the ranks that serve an endpoint, so that a port in use fails
  /// before any work (call it inside parallel::agree: every rank then stops together).
  /// `groups`: the job's process groups, or null for one process. Throws InputError
  /// naming the address when the port cannot be taken.
  MetricsReporter(const TrainOptions& options, parallel::ProcessGroups* groups);
  ~MetricsReporter();
  MetricsReporter(const MetricsReporter&) = delete;
  MetricsReporter& operator=(const MetricsReporter&) = delete;

  /// Registers the metric families for the ranks this endpoint serves (every rank, or
  /// with --metrics-per-node those of its node, found by one all-gather of a hash of each
  /// host name) and sets the MFU peak: --peak-tflops × nodes, else an sgemm measured
  /// here with every hardware thread (~a second; FLOP/s of the whole job). `model` must
  /// outlive this object. Collective over the world with --metrics-port; throws only
  /// what the collectives throw (CollectiveTimeout).
  void start(const Olmo2Model& model);

  /// True when the 1-based step `step` gathers per-layer diagnostics: with
  /// --metrics-port, at step 1 and every --diag-interval steps. The same on every rank,
  /// so every rank takes the same branch.
  bool diagnostics_at(int64_t step) const;

  /// Squared L2 norm of each decoder layer's gradients held by this rank, indexed by
  /// global layer (0 for layers of other stages): a replicated parameter counts on the
  /// TP rank that owns it only, so the sum over TP counts it once (docs/architecture.md
  /// §11.5, grad norm with sharded and replicated parameters). Call before clipping
  /// changes the gradients. Local (no collective); throws nothing.
  std::vector<double> layer_grad_squares(const std::vector<Parameter>& params) const;

  /// Publishes step `r`: every rank's step time (seconds) gathered over the world; on
  /// a diagnostics step, the per-layer forward norms (means over tokens, summed over DP),
  /// attention logit maxima (max over TP and DP), gradient norms (squares summed over TP)
  /// and one world sum that brings each stage's layers to every rank; MFU = tokens/s ×
  /// 3 × forward FLOPs per token / peak. `nonfinite`: the step was skipped for a
  /// non-finite value (else a skip was for a spike). No-op without --metrics-port;
  /// else collective over the world, TP and DP; throws what the collectives throw.
  void record_metrics(const StepRecord& r, bool nonfinite, bool diag_step, const LayerDiagnostics& diag,
                      std::vector<double> layer_grad_sq);

  /// Records one checkpoint save's duration in seconds (endpoint ranks; else no-op).
  void record_save_seconds(double seconds);

 private:
  std::vector<int> served_ranks() const;
  const TrainOptions options_;
  parallel::ProcessGroups* groups_ = nullptr;
  parallel::Communicator* world_ = nullptr;  ///< null: one process
  parallel::Communicator *tp_ = nullptr, *dp_ = nullptr, *cp_ = nullptr;
  int dp_rank_ = 0;
  const Olmo2Model* model_ = nullptr;                      ///< set by start()
  /// --port-file: the endpoints' addresses gathered to world rank 0, which writes them
  /// (collective over the world).
  void publish_port_file();

  std::unique_ptr<monitoring::MetricsEndpoint> endpoint_;  ///< endpoint ranks, with --metrics-port
  std::unique_ptr<monitoring::TrainMetrics> metrics_;      ///< endpoint ranks, with --metrics-port
  double peak_flops_ = 0;                                  ///< of the whole job, for MFU
  PortFileGuard port_file_;                                ///< world rank 0, with --port-file
};

}  // namespace olmo2
