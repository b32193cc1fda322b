// Prometheus metrics of a training job (docs/architecture.md §9): one endpoint, on world rank 0,
// holding every rank's values, which the trainer gathers over MPI at step boundaries —
// a scrape only reads what is already there.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace prometheus {
class Registry;
}  // namespace prometheus
namespace httplib {
class Server;
}  // namespace httplib

namespace olmo2::monitoring {

/// The HTTP endpoint (GET /metrics, Prometheus text format 0.0.4) and its registry:
/// prometheus-cpp's registry and serializer, served by cpp-httplib on its own thread.
/// A scrape reads the registry only; it never waits for or talks to other ranks.
class MetricsEndpoint {
 public:
  /// Listens on host:port (port 1…65535, or 0: a free port the kernel picks). Throws
  /// InputError naming the address when it cannot (port in use, bad host), before
  /// anything else is done.
  MetricsEndpoint(const std::string& host, int port);
  ~MetricsEndpoint();
  prometheus::Registry& registry() { return *registry_; }
  /// Held by a scrape while it collects; hold it while updating several metrics that
  /// belong together, so that no scrape sees half of one step's values.
  std::mutex& update_mutex() { return *mutex_; }
  /// "host:port" with the bound port.
  const std::string& address() const { return address_; }
  int port() const { return port_; }  ///< the bound port

 private:
  std::string address_;
  int port_ = 0;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<std::mutex> mutex_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};  // the server thread's listen_after_bind() is over
};

/// Where one rank sits in the layout (its metrics' labels rank, tp, pp, dp).
struct RankCoords {
  int rank = 0, tp = 0, pp = 0, dp = 0;
};

/// The phases of a step's wall time on one rank, as (phase, group) label pairs of
/// olmo2_train_step_phase_seconds, in StepValues::rank_phase_seconds order
/// (docs/architecture.md §9 "Step time breakdown").
inline constexpr int kStepPhases = 5;
inline constexpr const char* kStepPhaseLabels[kStepPhases][2] = {
    {"compute", "none"}, {"bubble", "none"}, {"comm_wait", "tp"}, {"comm_wait", "dp"}, {"comm_wait", "cp"}};

/// One step's values, already reduced over the ranks (identical on every rank).
struct StepValues {
  int64_t step = 0;
  double loss = 0, z_loss = 0, grad_norm = 0, learning_rate = 0;
  int64_t tokens = 0;                ///< input tokens of this step (all ranks)
  double tokens_per_second = 0;
  double model_flops_utilization = 0;  ///< ratio in [0, 1]
  bool nonfinite = false;            ///< skipped for a NaN/Inf
  bool spike_skipped = false;        ///< skipped for a spike (--skip-spikes)
  bool loss_spike = false, grad_norm_spike = false;
  std::vector<double> rank_step_seconds;  ///< wall time of the step on each world rank
  std::vector<double> rank_gpu_in_use_bytes;  ///< each world rank's GPU memory handed out (ops::gpu_memory)
  std::vector<double> rank_gpu_cached_bytes;  ///< each world rank's GPU memory cached, not in use
  /// kStepPhases seconds per world rank (rank-major, kStepPhaseLabels order): compute,
  /// bubble, and the waits on tp, dp and cp.
  std::vector<double> rank_phase_seconds;
};

/// Per-layer diagnostics (every --diag-interval steps), one entry per decoder layer:
/// mean over tokens of the L2 norm of the residual stream after the block
/// (layer_output), of the post-norm attention and MLP outputs the block adds, the
/// block's gradient L2 norm, and the largest pre-softmax attention logit q·k/√d.
struct LayerValues {
  std::vector<double> layer_output, attention_output, mlp_output, grad_norm, attention_logit_max;
};

/// The training metric families (names in deploy/metrics.txt and docs/architecture.md §9),
/// registered in `registry`; counters for every label value exist from the start at 0.
/// `ranks`: the ranks whose step time this endpoint serves (all, or one node's). `run_wide`: also
/// the job-wide families (loss, tokens, spikes, per-layer diagnostics, …) — true on exactly
/// one endpoint of the job, so that sums over endpoints count them once. Updates hold
/// `endpoint`'s update mutex: a scrape sees one step's values, never a mix.
class TrainMetrics {
 public:
  /// `gpu`: also the GPU memory gauges (olmo2_gpu_memory_in_use_bytes, _cached_bytes).
  TrainMetrics(MetricsEndpoint& endpoint, const std::vector<RankCoords>& ranks, int64_t layers, bool run_wide = true,
               bool gpu = false);
  ~TrainMetrics();
  /// Sets the gauges, adds to the counters and observes each rank's step time.
  void record_step(const StepValues& v);
  /// Sets the per-layer gauges (vectors of `layers` entries).
  void record_layers(const LayerValues& v);
  /// Observes one checkpoint save's duration.
  void record_checkpoint_save(double seconds);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace olmo2::monitoring
