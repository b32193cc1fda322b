#include "monitoring/train_metrics.h"

#include <sys/socket.h>

#include <chrono>

#include <httplib.h>
#include <prometheus/counter.h>
#include <prometheus/text_serializer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "core/error.h"

namespace olmo2::monitoring {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

MetricsEndpoint::MetricsEndpoint(const std::string& host, int port)
    : address_(host + ":" + std::to_string(port)),
      registry_(std::make_shared<prometheus::Registry>()),
      mutex_(std::make_shared<std::mutex>()),
      server_(std::make_unique<httplib::Server>()) {
  if (port < 0 || port > 65535) {
    OLMO2_THROW(InputError, "--metrics-port ", port, " is not a TCP port (1-65535, or 0: any free one)");
  }
  // The exposition is prometheus-cpp's; the HTTP server is cpp-httplib's (civetweb's
  // small fixed worker stacks overflowed in this process).
  std::shared_ptr<prometheus::Registry> registry = registry_;
  // Enough workers, and short timeouts, that idle or slow clients cannot hold up a scrape.
  server_->new_task_queue = [] { return new httplib::ThreadPool(8); };
  server_->set_read_timeout(2, 0);
  server_->set_write_timeout(5, 0);
  server_->set_keep_alive_timeout(2);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second
  // job bind the same port silently instead of failing at start.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  std::shared_ptr<std::mutex> mutex = mutex_;
  server_->Get("/metrics", [registry, mutex](const httplib::Request&, httplib::Response& res) {
    std::vector<prometheus::MetricFamily> families;
    {
      const std::lock_guard<std::mutex> lock(*mutex);
      families = registry->Collect();
    }
    res.set_content(prometheus::TextSerializer().Serialize(families), "text/plain; version=0.0.4");
  });
  if (host.empty()) OLMO2_THROW(InputError, "--metrics-host is empty (give an address, e.g. 127.0.0.1 or 0.0.0.0)");
  if (host.find(':') != std::string::npos) address_ = "[" + host + "]:" + std::to_string(port);  // IPv6
  // Port 0: the kernel picks a free port, which address() then names (no race with
  // another process between choosing a port and binding it).
  const int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    OLMO2_THROW(InputError, "--metrics-port ", port, ": cannot serve metrics on ", address_,
                port == 0 ? " (the host does not resolve to an address of this machine)"
                          : " (the port is in use, or the host does not resolve to an address of this machine)");
  }
  port_ = bound;
  address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(bound);
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_ = true;
  });
}

MetricsEndpoint::~MetricsEndpoint() {
  // cpp-httplib's stop() does nothing until listen_after_bind() has marked the server
  // running: a stop that came first (a job refused right after start, on a loaded
  // machine) left the thread accepting forever and this join hanging every rank. Wait
  // for the server to run (or its listen to have failed), then stop it.
  while (!server_->is_running() && !listen_returned_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

struct TrainMetrics::Impl {
  prometheus::Registry unserved;
  std::mutex* mutex = nullptr;
  bool run_wide = true;
  Gauge *loss, *z_loss, *grad_norm, *lr, *step, *last_step_time, *tokens_per_second, *mfu;
  Counter *tokens, *skipped_nonfinite, *skipped_spike, *nonfinite, *spikes_loss, *spikes_grad;
  std::vector<Histogram*> step_seconds;  // per rank served here
  std::vector<int> step_rank;            // its world rank
  std::vector<Gauge*> gpu_in_use, gpu_cached;  // per rank served here (with --device cuda)
  std::vector<Gauge*> phase_seconds;           // per rank served here, kStepPhases each
  Histogram* save_seconds;
  std::vector<Gauge*> layer_output, attention_output, mlp_output, layer_grad_norm, logit_max;
};

TrainMetrics::TrainMetrics(MetricsEndpoint& endpoint, const std::vector<RankCoords>& ranks, int64_t layers,
                           bool run_wide, bool gpu)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.mutex = &endpoint.update_mutex(), m.run_wide = run_wide;
  prometheus::Registry& r = endpoint.registry();
  // The job-wide families of an endpoint that does not serve them live in a registry
  // nobody collects (so record_step needs no branches).
  prometheus::Registry& jobwide = run_wide ? r : m.unserved;
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(jobwide).Add({});
  };
  m.loss = gauge("olmo2_train_loss", "Cross-entropy of the last step: token-weighted mean over the global batch");
  m.z_loss = gauge("olmo2_train_z_loss", "Z-loss term of the last step: coefficient times mean logsumexp squared");
  m.grad_norm = gauge("olmo2_train_grad_norm", "Global L2 norm of the gradients of the last step, before clipping");
  m.lr = gauge("olmo2_train_learning_rate", "Learning rate applied in the last step");
  m.step = gauge("olmo2_train_step", "Last completed training step (applied or skipped)");
  m.last_step_time = gauge("olmo2_train_last_step_timestamp_seconds", "Unix time at which the last step completed");
  m.tokens_per_second = gauge("olmo2_train_tokens_per_second", "Input tokens per second in the last step, whole job");
  m.mfu = gauge("olmo2_train_model_flops_utilization",
                "Model FLOPs per second of the last step over the job's peak (ratio 0-1; peak: sgemm measured at start)");
  m.tokens = &prometheus::BuildCounter().Name("olmo2_train_tokens_total").Help("Input tokens trained on").Register(jobwide).Add({});
  auto& skipped = prometheus::BuildCounter()
                      .Name("olmo2_train_skipped_steps_total")
                      .Help("Steps whose update was not applied, by reason")
                      .Register(jobwide);
  m.skipped_nonfinite = &skipped.Add({{"reason", "nonfinite"}});
  m.skipped_spike = &skipped.Add({{"reason", "spike"}});
  m.nonfinite = &prometheus::BuildCounter()
                     .Name("olmo2_train_nonfinite_steps_total")
                     .Help("Steps with a NaN or Inf loss or gradient norm")
                     .Register(jobwide)
                     .Add({});
  auto& spikes = prometheus::BuildCounter()
                     .Name("olmo2_train_spikes_total")
                     .Help("Spikes flagged by the rolling-window detector, by signal")
                     .Register(jobwide);
  m.spikes_loss = &spikes.Add({{"signal", "loss"}});
  m.spikes_grad = &spikes.Add({{"signal", "grad_norm"}});
  const Histogram::BucketBoundaries step_buckets{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120};
  auto& step_fam = prometheus::BuildHistogram()
                       .Name("olmo2_train_step_seconds")
                       .Help("Wall time of one training step on each rank, in seconds")
                       .Register(r);
  for (const RankCoords& c : ranks) {
    m.step_rank.push_back(c.rank);
    m.step_seconds.push_back(&step_fam.Add({{"rank", std::to_string(c.rank)}, {"tp", std::to_string(c.tp)},
                                            {"pp", std::to_string(c.pp)}, {"dp", std::to_string(c.dp)}},
                                           step_buckets));
  }
  auto& phase_fam = prometheus::BuildGauge()
                        .Name("olmo2_train_step_phase_seconds")
                        .Help("Seconds of the last step on each rank spent computing, idle in the pipeline bubble, "
                              "or waiting on a group's communication")
                        .Register(r);
  for (const RankCoords& c : ranks) {
    for (const auto& [phase, group] : kStepPhaseLabels) {
      m.phase_seconds.push_back(&phase_fam.Add({{"rank", std::to_string(c.rank)}, {"tp", std::to_string(c.tp)},
                                                {"pp", std::to_string(c.pp)}, {"dp", std::to_string(c.dp)},
                                                {"phase", phase}, {"group", group}}));
    }
  }
  if (gpu) {
    auto& in_use = prometheus::BuildGauge()
                       .Name("olmo2_gpu_memory_in_use_bytes")
                       .Help("GPU memory the caching allocator has handed out on each rank, in bytes")
                       .Register(r);
    auto& cached = prometheus::BuildGauge()
                       .Name("olmo2_gpu_memory_cached_bytes")
                       .Help("GPU memory the caching allocator holds free for reuse on each rank, in bytes")
                       .Register(r);
    for (const RankCoords& c : ranks) {
      const std::map<std::string, std::string> labels{{"rank", std::to_string(c.rank)}, {"tp", std::to_string(c.tp)},
                                                      {"pp", std::to_string(c.pp)}, {"dp", std::to_string(c.dp)}};
      m.gpu_in_use.push_back(&in_use.Add(labels));
      m.gpu_cached.push_back(&cached.Add(labels));
    }
  }
  m.save_seconds = &prometheus::BuildHistogram()
                        .Name("olmo2_train_checkpoint_save_seconds")
                        .Help("Wall time of one checkpoint save (gather and write), in seconds")
                        .Register(jobwide)
                        .Add({}, Histogram::BucketBoundaries{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600});
  auto per_layer = [&](const char* name, const char* help, std::vector<Gauge*>& out) {
    auto& fam = prometheus::BuildGauge().Name(name).Help(help).Register(jobwide);
    for (int64_t l = 0; l < layers; ++l) out.push_back(&fam.Add({{"layer", std::to_string(l)}}));
  };
  per_layer("olmo2_train_layer_output_norm", "Mean per-token L2 norm of the residual stream after the block",
            m.layer_output);
  per_layer("olmo2_train_attention_output_norm",
            "Mean per-token L2 norm of the post-norm attention output the block adds", m.attention_output);
  per_layer("olmo2_train_mlp_output_norm", "Mean per-token L2 norm of the post-norm MLP output the block adds",
            m.mlp_output);
  per_layer("olmo2_train_layer_grad_norm", "L2 norm of the block's parameter gradients (before clipping)",
            m.layer_grad_norm);
  per_layer("olmo2_train_attention_logit_max", "Largest pre-softmax attention logit q.k/sqrt(head_dim) in the block",
            m.logit_max);
}

TrainMetrics::~TrainMetrics() = default;

void TrainMetrics::record_step(const StepValues& v) {
  Impl& m = *impl_;
  const std::lock_guard<std::mutex> lock(*m.mutex);
  m.step->Set(static_cast<double>(v.step));
  m.last_step_time->Set(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  m.lr->Set(v.learning_rate);
  m.tokens->Increment(static_cast<double>(v.tokens));
  m.tokens_per_second->Set(v.tokens_per_second);
  m.mfu->Set(v.model_flops_utilization);
  if (v.nonfinite) {
    m.nonfinite->Increment();
    m.skipped_nonfinite->Increment();
  } else {
    m.loss->Set(v.loss), m.z_loss->Set(v.z_loss), m.grad_norm->Set(v.grad_norm);
  }
  if (v.spike_skipped) m.skipped_spike->Increment();
  if (v.loss_spike) m.spikes_loss->Increment();
  if (v.grad_norm_spike) m.spikes_grad->Increment();
  for (size_t i = 0; i < m.step_seconds.size(); ++i) {
    const size_t r = static_cast<size_t>(m.step_rank[i]);
    if (r < v.rank_step_seconds.size()) m.step_seconds[i]->Observe(v.rank_step_seconds[r]);
    constexpr size_t P = kStepPhases;
    for (size_t k = 0; k < P && P * (r + 1) <= v.rank_phase_seconds.size(); ++k) {
      m.phase_seconds[P * i + k]->Set(v.rank_phase_seconds[P * r + k]);
    }
    if (i < m.gpu_in_use.size() && r < v.rank_gpu_in_use_bytes.size()) {
      m.gpu_in_use[i]->Set(v.rank_gpu_in_use_bytes[r]);
      m.gpu_cached[i]->Set(v.rank_gpu_cached_bytes[r]);
    }
  }
}

void TrainMetrics::record_layers(const LayerValues& v) {
  Impl& m = *impl_;
  const std::lock_guard<std::mutex> lock(*m.mutex);
  const std::pair<const std::vector<double>*, std::vector<Gauge*>*> all[] = {
      {&v.layer_output, &m.layer_output}, {&v.attention_output, &m.attention_output},
      {&v.mlp_output, &m.mlp_output}, {&v.grad_norm, &m.layer_grad_norm}, {&v.attention_logit_max, &m.logit_max}};
  for (const auto& [values, gauges] : all) {
    for (size_t l = 0; l < values->size() && l < gauges->size(); ++l) (*gauges)[l]->Set((*values)[l]);
  }
}

void TrainMetrics::record_checkpoint_save(double seconds) {
  const std::lock_guard<std::mutex> lock(*impl_->mutex);
  impl_->save_seconds->Observe(seconds);
}

}  // namespace olmo2::monitoring
