#include "monitoring/serve_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>

#include "core/error.h"

namespace olmo2::monitoring {

struct ServeMetrics::Families {
  prometheus::Registry registry;
  std::map<std::string, prometheus::Counter*> requests;
  prometheus::Counter *prompt_tokens = nullptr, *generated_tokens = nullptr;
  prometheus::Histogram *ttft = nullptr, *itl = nullptr, *e2e = nullptr, *queue = nullptr;
  prometheus::Counter* preemptions = nullptr;
  prometheus::Counter *cache_queries = nullptr, *cache_hits = nullptr;
  prometheus::Counter *spec_proposed = nullptr, *spec_accepted = nullptr;
  prometheus::Gauge *running = nullptr, *waiting = nullptr, *kv_usage = nullptr;
  prometheus::Gauge *activation_bytes = nullptr, *activation_waiting = nullptr;
  prometheus::Gauge *gpu_in_use = nullptr, *gpu_cached = nullptr;  // made by the first gpu_memory()
};

namespace {
prometheus::Histogram* histogram(prometheus::Registry& r, const std::string& name, const std::string& help,
                                 prometheus::Histogram::BucketBoundaries buckets) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add({}, std::move(buckets));
}
}  // namespace

ServeMetrics::ServeMetrics() : f_(std::make_unique<Families>()) {
  auto& reg = f_->registry;
  auto& req = prometheus::BuildCounter()
                  .Name("olmo2_serve_requests_total")
                  .Help("Completion requests by outcome: success, invalid (client error, 4xx), error (server "
                        "error, 5xx), rejected (503), cancelled")
                  .Register(reg);
  for (const char* o : {"success", "invalid", "error", "rejected", "cancelled"}) f_->requests[o] = &req.Add({{"outcome", o}});
  f_->prompt_tokens = &prometheus::BuildCounter().Name("olmo2_serve_prompt_tokens_total")
                           .Help("Prompt tokens of served requests").Register(reg).Add({});
  f_->generated_tokens = &prometheus::BuildCounter().Name("olmo2_serve_generated_tokens_total")
                              .Help("Tokens generated for served requests").Register(reg).Add({});
  // vLLM's boundaries, plus 2 s: the TTFT alert's threshold (deploy/README.md) must be a bucket edge.
  const prometheus::Histogram::BucketBoundaries latency = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                                           0.5,   0.75,  1.0,  2.0,  2.5,  5.0,  7.5,  10.0, 20.0, 40.0,
                                                           80.0, 160.0, 640.0};
  f_->ttft = histogram(reg, "olmo2_serve_time_to_first_token_seconds",
                       "Arrival of a request to its first generated token", latency);
  f_->itl = histogram(reg, "olmo2_serve_inter_token_latency_seconds",
                      "Time between successive generated tokens of a request", latency);
  f_->e2e = histogram(reg, "olmo2_serve_end_to_end_latency_seconds", "Arrival of a request to its last token",
                      latency);
  f_->queue = histogram(reg, "olmo2_serve_queue_time_seconds",
                        "Arrival of a request to its first scheduled step", latency);
  f_->preemptions = &prometheus::BuildCounter().Name("olmo2_serve_preemptions_total")
                         .Help("Sequences pre-empted when KV blocks ran out (recomputed later)").Register(reg).Add({});
  f_->cache_queries = &prometheus::BuildCounter().Name("olmo2_serve_prefix_cache_queries_total")
                           .Help("Tokens looked up in the prefix cache (sequences admitted with nothing computed)")
                           .Register(reg).Add({});
  f_->cache_hits = &prometheus::BuildCounter().Name("olmo2_serve_prefix_cache_hits_total")
                        .Help("Tokens of those lookups whose KV blocks were found in the prefix cache")
                        .Register(reg).Add({});
  f_->spec_proposed = &prometheus::BuildCounter().Name("olmo2_serve_spec_proposed_tokens_total")
                           .Help("Drafted tokens the target verified (speculative decoding)")
                           .Register(reg).Add({});
  f_->spec_accepted = &prometheus::BuildCounter().Name("olmo2_serve_spec_accepted_tokens_total")
                           .Help("Drafted tokens the target accepted (speculative decoding)")
                           .Register(reg).Add({});
  f_->running = &prometheus::BuildGauge().Name("olmo2_serve_running_requests")
                     .Help("Requests in the running batch").Register(reg).Add({});
  f_->waiting = &prometheus::BuildGauge().Name("olmo2_serve_waiting_requests")
                     .Help("Requests waiting to be scheduled (new or pre-empted)").Register(reg).Add({});
  f_->kv_usage = &prometheus::BuildGauge().Name("olmo2_serve_kv_cache_usage_ratio")
                      .Help("Share of KV-cache blocks in use, 0 to 1").Register(reg).Add({});
  f_->activation_bytes = &prometheus::BuildGauge().Name("olmo2_serve_activation_memory_bytes")
                              .Help("Bytes of activation reads the requests in the server may return at worst "
                                    "(reserved against --max-activation-memory)")
                              .Register(reg).Add({});
  f_->activation_waiting = &prometheus::BuildGauge().Name("olmo2_serve_activation_waiting_requests")
                                .Help("Requests with activation reads waiting for --max-activation-memory")
                                .Register(reg).Add({});
}

ServeMetrics::~ServeMetrics() = default;

void ServeMetrics::request_finished(const std::string& outcome) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = f_->requests.find(outcome);
  OLMO2_CHECK(it != f_->requests.end(), "unknown request outcome ", outcome);
  it->second->Increment();
}

void ServeMetrics::request_served(int64_t prompt_tokens, int64_t generated_tokens, double queue_s, double ttft_s,
                                  double e2e_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  f_->prompt_tokens->Increment(static_cast<double>(prompt_tokens));
  f_->generated_tokens->Increment(static_cast<double>(generated_tokens));
  f_->queue->Observe(queue_s);
  f_->ttft->Observe(ttft_s);
  f_->e2e->Observe(e2e_s);
}

void ServeMetrics::inter_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  f_->itl->Observe(seconds);
}

void ServeMetrics::engine_state(int64_t running, int64_t waiting, double kv_cache_usage_ratio) {
  std::lock_guard<std::mutex> lock(mutex_);
  f_->running->Set(static_cast<double>(running));
  f_->waiting->Set(static_cast<double>(waiting));
  f_->kv_usage->Set(kv_cache_usage_ratio);
}

void ServeMetrics::gpu_memory(double in_use_bytes, double cached_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!f_->gpu_in_use) {
    const std::map<std::string, std::string> rank0{{"rank", "0"}, {"tp", "0"}, {"pp", "0"}, {"dp", "0"}};
    f_->gpu_in_use = &prometheus::BuildGauge().Name("olmo2_gpu_memory_in_use_bytes")
                          .Help("GPU memory the caching allocator has handed out on each rank, in bytes")
                          .Register(f_->registry).Add(rank0);
    f_->gpu_cached = &prometheus::BuildGauge().Name("olmo2_gpu_memory_cached_bytes")
                          .Help("GPU memory the caching allocator holds free for reuse on each rank, in bytes")
                          .Register(f_->registry).Add(rank0);
  }
  f_->gpu_in_use->Set(in_use_bytes);
  f_->gpu_cached->Set(cached_bytes);
}

void ServeMetrics::activation_memory(int64_t reserved_bytes, int64_t waiting) {
  std::lock_guard<std::mutex> lock(mutex_);
  f_->activation_bytes->Set(static_cast<double>(reserved_bytes));
  f_->activation_waiting->Set(static_cast<double>(waiting));
}

void ServeMetrics::preempted(int64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  f_->preemptions->Increment(static_cast<double>(count));
}

void ServeMetrics::prefix_cache(int64_t queries, int64_t hits) {
  std::lock_guard<std::mutex> lock(mutex_);
  f_->cache_queries->Increment(static_cast<double>(queries));
  f_->cache_hits->Increment(static_cast<double>(hits));
}

void ServeMetrics::speculated(int64_t proposed, int64_t accepted) {
  std::lock_guard<std::mutex> lock(mutex_);
  f_->spec_proposed->Increment(static_cast<double>(proposed));
  f_->spec_accepted->Increment(static_cast<double>(accepted));
}

std::string ServeMetrics::scrape() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return prometheus::TextSerializer().Serialize(f_->registry.Collect());
}

}  // namespace olmo2::monitoring
