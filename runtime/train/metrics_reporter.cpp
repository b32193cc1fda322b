#include "runtime/train/metrics_reporter.h"

#include "ops/device_runtime.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <span>
#include <string>
#include <thread>

#include "ops/gemm.h"
#include "ops/tensor_ops.h"
#include "ops/threads.h"
#include "parallel/node_ranks.h"
#include "parallel/string_gather.h"
#include "runtime/io/port_file.h"
#include "runtime/train/grad_sync.h"

namespace olmo2 {

namespace {
/// fp32 matrix-product FLOP/s of this node with every hardware thread (the MFU
/// denominator when --peak-tflops is not given).
double node_sgemm_flops() {
  const int before = num_threads();
  set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const double flops = ops::measure_linear_flops(512, 10);
  set_num_threads(before);
  return flops;
}
}  // namespace

MetricsReporter::MetricsReporter(const TrainOptions& options, parallel::ProcessGroups* groups)
    : options_(options), groups_(groups) {
  if (groups_) {
    world_ = groups_->world.get(), tp_ = groups_->tp.get(), dp_ = groups_->dp.get();
    dp_rank_ = dp_->rank();
    cp_ = groups_->cp && groups_->cp->size() > 1 ? groups_->cp.get() : nullptr;
  }
  const TrainOptions& opt = options_;
  // The metrics port is taken now, so a port in use stops every rank before any work.
  const bool metrics_rank = opt.metrics_port >= 0 &&
                            (!world_ || (opt.metrics_per_node ? groups_->local_rank == 0 : world_->rank() == 0));
  if (!opt.port_file.empty() && (!world_ || world_->rank() == 0)) check_port_file(opt.port_file);
  if (metrics_rank) endpoint_ = std::make_unique<monitoring::MetricsEndpoint>(opt.metrics_host, opt.metrics_port);
}

MetricsReporter::~MetricsReporter() = default;

void MetricsReporter::start(const Olmo2Model& model) {
  model_ = &model;
  // Which ranks each endpoint serves: every rank, or (--metrics-per-node) those of its
  // node (parallel::node_ranks: one all-gather of a u64 hash of each host name).
  std::vector<int> served;
  if (options_.metrics_port >= 0) {
    if (options_.metrics_per_node && world_) {
      served = parallel::node_ranks(world_);
    } else {
      for (int r = 0; r < (world_ ? world_->size() : 1); ++r) served.push_back(r);
    }
  }
  if (endpoint_) {  // the metric families, and the peak for MFU
    std::vector<monitoring::RankCoords> ranks;
    const int world = world_ ? world_->size() : 1;
    for (int r : served) {
      const parallel::Coords c = world_ ? groups_->topology.coords(r) : parallel::Coords{};
      ranks.push_back({r, c.tp, c.pp, c.dp});
    }
    // With one endpoint per node, the job-wide values are served by world rank 0's only.
    metrics_ = std::make_unique<monitoring::TrainMetrics>(*endpoint_, ranks, model_->config().num_hidden_layers,
                                                          !world_ || world_->rank() == 0,
                                                          options_.device == Device::CUDA);
    const int nodes = world_ ? std::max(1, world / std::max(1, groups_->local_size)) : 1;
    // On a GPU the host's sgemm says nothing about the peak: MFU only with --peak-tflops.
    const bool gpu_without_peak = options_.device != Device::CPU && options_.peak_tflops <= 0;
    peak_flops_ = gpu_without_peak ? 0.0
                                   : (options_.peak_tflops > 0 ? options_.peak_tflops * 1e12 : node_sgemm_flops()) * nodes;
    std::cerr << "metrics on http://" << endpoint_->address() << "/metrics for " << ranks.size() << " of " << world
              << " ranks ("
              << (gpu_without_peak ? std::string("no MFU: give --peak-tflops, the GPU's peak per node")
                                   : "MFU against " + std::to_string(peak_flops_ / 1e9) + " GFLOP/s")
              << ")\n";
  }
  publish_port_file();
}

void MetricsReporter::publish_port_file() {
  if (options_.port_file.empty() || options_.metrics_port < 0) return;
  const std::string mine = endpoint_ ? published_address(options_.metrics_host, endpoint_->port()) : "";
  const std::vector<std::string> all = world_ ? parallel::all_gather_strings(*world_, mine) : std::vector{mine};
  if (world_ && world_->rank() != 0) return;
  std::vector<std::string> lines;
  for (const std::string& a : all) {
    if (!a.empty()) lines.push_back(a);
  }
  write_port_file(options_.port_file, lines);
  port_file_.reset(options_.port_file);
}

bool MetricsReporter::diagnostics_at(int64_t step) const {
  return options_.metrics_port >= 0 && (step == 1 || step % options_.diag_interval == 0);
}

std::vector<double> MetricsReporter::layer_grad_squares(const std::vector<Parameter>& params) const {
  std::vector<double> layer_grad_sq;
  layer_grad_sq.assign(static_cast<size_t>(model_->config().num_hidden_layers), 0.0);
  const int tp_rank = tp_ ? tp_->rank() : 0;
  for (const Parameter& p : params) {
    if (!p.owned(tp_rank) || !p.name.starts_with("model.layers.")) continue;
    const size_t l = std::stoul(p.name.substr(13));
    layer_grad_sq[l] += ops::sum_squares(p.grad->view());
  }
  return layer_grad_sq;
}

void MetricsReporter::record_metrics(const StepRecord& r, bool nonfinite, bool diag_step,
                                     const LayerDiagnostics& diag, std::vector<double> layer_grad_sq) {
  if (options_.metrics_port < 0) return;
  // Every rank's step time and GPU memory (in use, cached: ops::gpu_memory) reach rank 0
  // at this step boundary (never at a scrape).
  const int world = world_ ? world_->size() : 1;
  const ops::GpuMemory gm = ops::gpu_memory();
  // Per rank: step time, GPU memory, then the step's phases (monitoring::kStepPhases order).
  constexpr size_t kPer = 3 + monitoring::kStepPhases;
  const float mine[kPer] = {static_cast<float>(r.seconds),         static_cast<float>(gm.in_use_bytes),
                            static_cast<float>(gm.cached_bytes),    static_cast<float>(r.compute_seconds),
                            static_cast<float>(r.bubble_seconds),   static_cast<float>(r.wait.tp),
                            static_cast<float>(r.wait.dp),          static_cast<float>(r.wait.cp)};
  std::vector<float> gathered(mine, mine + kPer);
  if (world_) {
    gathered.assign(kPer * static_cast<size_t>(world), 0.0f);
    world_->all_gather(std::span<const float>(mine, kPer), gathered);
  }
  std::vector<float> seconds(static_cast<size_t>(world));
  std::vector<double> in_use(static_cast<size_t>(world)), cached(static_cast<size_t>(world)), phases;
  for (size_t i = 0; i < static_cast<size_t>(world); ++i) {
    seconds[i] = gathered[kPer * i], in_use[i] = gathered[kPer * i + 1], cached[i] = gathered[kPer * i + 2];
    phases.insert(phases.end(), gathered.begin() + static_cast<std::ptrdiff_t>(kPer * i + 3),
                  gathered.begin() + static_cast<std::ptrdiff_t>(kPer * (i + 1)));
  }
  monitoring::LayerValues lv;
  if (diag_step) {
    const int64_t L = model_->config().num_hidden_layers;
    const size_t local = diag.output_norm_sum.size();
    std::vector<double> sums;  // this stage's norm sums and token count, summed over DP
    for (const auto* v : {&diag.output_norm_sum, &diag.attention_norm_sum, &diag.mlp_norm_sum}) {
      sums.insert(sums.end(), v->begin(), v->end());
    }
    sums.push_back(static_cast<double>(diag.tokens));
    all_reduce_doubles(dp_, sums);
    all_reduce_doubles(cp_, sums);  // each CP rank's share of the sequences' tokens
    std::vector<float> logits = diag.attention_logit_max;  // this rank's heads: max over TP, DP and CP
    for (parallel::Communicator* c : {tp_, dp_, cp_}) {
      if (c && c->size() > 1) c->all_reduce_max(logits);
    }
    all_reduce_doubles(tp_, layer_grad_sq);  // each TP rank's owned shards
    std::vector<float> v(static_cast<size_t>(5 * L), 0.0f);
    const bool reporter = (!tp_ || tp_->rank() == 0) && dp_rank_ == 0 && (!cp_ || cp_->rank() == 0);
    const double tokens = std::max(1.0, sums.back());
    for (size_t l = 0; reporter && l < local; ++l) {
      const size_t g = static_cast<size_t>(model_->shard().global_layer(static_cast<int64_t>(l)));
      v[g] = static_cast<float>(sums[l] / tokens);
      v[static_cast<size_t>(L) + g] = static_cast<float>(sums[local + l] / tokens);
      v[static_cast<size_t>(2 * L) + g] = static_cast<float>(sums[2 * local + l] / tokens);
      v[static_cast<size_t>(3 * L) + g] = static_cast<float>(std::sqrt(layer_grad_sq[g]));
      v[static_cast<size_t>(4 * L) + g] = logits[l];
    }
    if (world_) world_->all_reduce_sum(v);  // each layer comes from the one reporter of its stage
    auto part = [&](int64_t k) {
      return std::vector<double>(v.begin() + k * L, v.begin() + (k + 1) * L);
    };
    lv = {part(0), part(1), part(2), part(3), part(4)};
  }
  if (!metrics_) return;
  monitoring::StepValues sv;
  sv.step = r.step, sv.loss = r.loss, sv.z_loss = r.z_loss, sv.grad_norm = r.grad_norm, sv.learning_rate = r.lr;
  sv.tokens = options_.global_batch * options_.seq_len, sv.tokens_per_second = r.tokens_per_second;
  sv.model_flops_utilization =
      peak_flops_ > 0
          ? r.tokens_per_second * 3.0 * model_->forward_flops(1, (static_cast<double>(options_.seq_len) + 1) / 2) /
                peak_flops_
          : 0;  // training = 3 × forward FLOPs (backward 2×), causal context (T+1)/2 on average
  sv.nonfinite = nonfinite, sv.spike_skipped = r.skipped && !nonfinite;
  sv.loss_spike = r.loss_spike, sv.grad_norm_spike = r.grad_norm_spike;
  sv.rank_step_seconds.assign(seconds.begin(), seconds.end());
  sv.rank_gpu_in_use_bytes = std::move(in_use), sv.rank_gpu_cached_bytes = std::move(cached);
  sv.rank_phase_seconds = std::move(phases);
  metrics_->record_step(sv);
  if (diag_step) metrics_->record_layers(lv);
}

void MetricsReporter::record_save_seconds(double seconds) {
  if (metrics_) metrics_->record_checkpoint_save(seconds);
}

}  // namespace olmo2
