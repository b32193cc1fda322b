#include "runtime/train/memory_report.h"

#include <span>

#include "core/error.h"
#include "monitoring/peak_memory.h"

namespace olmo2 {

MemoryPlanOptions run_plan_options(const TrainOptions& o, const parallel::Layout& layout, int64_t micro_batch) {
  MemoryPlanOptions p;
  p.layout = layout;
  p.pp_virtual = o.pp_virtual;
  p.pp_layers = o.pp_layers;
  p.zero_stage = layout.dp > 1 ? o.zero_stage : 0;
  p.recompute = o.recompute;
  p.precision = o.precision;
  p.seq_len = o.seq_len;
  p.micro_batch = micro_batch;
  p.global_batch = o.global_batch;
  p.device = o.device;
  p.grad_bucket_mb = o.grad_bucket_mb;
  p.overlap = o.overlap;
  return p;
}

std::vector<int64_t> check_run_memory(const ModelConfig& config, const TrainOptions& o,
                                      const parallel::Layout& layout, int64_t micro_batch) {
  const MemoryPlan plan = plan_memory(config, run_plan_options(o, layout, micro_batch));
  std::vector<int64_t> totals;  // the plan's ranks are the world's, in world-rank order
  for (const RankMemory& m : plan.ranks) totals.push_back(m.total);
  const RankMemory& worst = plan.largest();
  if (o.memory_per_rank > 0 && worst.total > o.memory_per_rank) {
    OLMO2_THROW(InputError, "--memory-per-rank ", format_gb(o.memory_per_rank), " (", o.memory_per_rank,
                " bytes): rank ", worst.rank, " ", parallel::to_string(worst.coords), " needs ", format_gb(worst.total),
                " by the memory plan (", largest_components(worst), "); `olmo2 plan` with this run's options (--micro-batch ",
                micro_batch, " --global-batch ", o.global_batch, " included) shows every rank and a layout that fits");
  }
  return totals;
}

void report_peak_memory(parallel::Communicator* world, const std::vector<int64_t>& planned, std::ostream& out) {
  const int64_t mine = monitoring::peak_resident_bytes();
  std::vector<int64_t> peaks(world ? static_cast<size_t>(world->size()) : 1, mine);
  if (world && world->size() > 1) world->all_gather(std::span<const int64_t>(&mine, 1), std::span<int64_t>(peaks));
  if (world && world->rank() != 0) return;
  std::string lines;
  for (size_t r = 0; r < peaks.size(); ++r) {
    lines += "memory: rank " + std::to_string(r) + " peak " + format_gb(peaks[r], 3) + " (plan " +
             (r < planned.size() ? format_gb(planned[r], 3) : std::string("?")) + ")\n";
  }
  out << lines << std::flush;
}

}  // namespace olmo2
