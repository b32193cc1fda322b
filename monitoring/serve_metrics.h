// Prometheus metrics of a serving job (docs/architecture.md §9, deploy/metrics.txt): kept by
// rank 0, where the HTTP server and the scheduler run, and served on the API's own port.
#pragma once

#include <memory>
#include <mutex>
#include <string>

namespace olmo2::monitoring {

/// The olmo2_serve_* families in their own prometheus-cpp registry. Every outcome label
/// (success, invalid, error, rejected, cancelled) exists at 0 from the start. Thread-safe.
/// Histogram buckets (seconds) follow vLLM's choices for the same quantities, plus 2 s
/// (the time-to-first-token alert's threshold is a bucket edge).
class ServeMetrics {
 public:
  ServeMetrics();
  ~ServeMetrics();

  /// A request ended: outcome is "success" (finished by stop or length), "invalid" (the
  /// client's mistake, refused with a 4xx: bad field, wrong key, too large), "error" (the
  /// server's failure, 5xx: an engine or rank failure), "rejected" (queue full or shutting
  /// down, 503) or "cancelled" (client gone, or cancelled at shutdown). Throws Error for
  /// another name.
  void request_finished(const std::string& outcome);
  /// A served request's token counts and latencies (seconds): queue (arrival → first
  /// scheduled), time to first token, end-to-end; inter-token gaps go one by one.
  void request_served(int64_t prompt_tokens, int64_t generated_tokens, double queue_s, double ttft_s,
                      double e2e_s);
  void inter_token(double seconds);
  /// Scheduler state after a step: running and waiting requests, used/total KV blocks.
  void engine_state(int64_t running, int64_t waiting, double kv_cache_usage_ratio);
  /// The activation budget's state: bytes reserved by requests with reads, requests
  /// waiting for room (runtime/serve/api/activation_budget.h).
  void activation_memory(int64_t reserved_bytes, int64_t waiting);
  /// This process's GPU memory from the caching allocator, in bytes: handed out, and
  /// held free for reuse (ops::gpu_memory). The gauges olmo2_gpu_memory_in_use_bytes and
  /// _cached_bytes (labels of rank 0) exist from the first call on, so a CPU server has none.
  void gpu_memory(double in_use_bytes, double cached_bytes);
  /// Sequences pre-empted (blocks freed, recomputed later) since the last call.
  void preempted(int64_t count);
  /// Prefix caching since the last call, in tokens (as vLLM counts them): tokens of the
  /// sequences admitted with nothing computed (`queries`), and of those the tokens whose
  /// KV blocks were found in the cache (`hits` ≤ queries).
  void prefix_cache(int64_t queries, int64_t hits);
  /// Speculative decoding since the last call: drafted tokens the target verified
  /// (`proposed`) and of those the ones it accepted (`accepted` ≤ proposed); the counters
  /// olmo2_serve_spec_proposed_tokens_total and _accepted_tokens_total (vLLM's
  /// num_draft_tokens and num_accepted_tokens).
  void speculated(int64_t proposed, int64_t accepted);

  /// The whole registry in the Prometheus text format 0.0.4.
  std::string scrape() const;

 private:
  struct Families;
  std::unique_ptr<Families> f_;
  mutable std::mutex mutex_;
};

}  // namespace olmo2::monitoring
