// `olmo2 plan`: the memory plan of a layout, per rank, before a job is queued
// (runtime/train/memory_plan.h; docs/architecture.md §7 "Memory plan", §12 command line).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include <boost/program_options.hpp>

#include "runtime/train/memory_plan.h"

namespace olmo2 {

/// What `olmo2 plan` is asked (the layout comes from the layout options, CliConfig::layout).
struct PlanRequest {
  std::string model_config;  ///< --model-config FILE
  std::string model_dir;     ///< --model DIR (its config.json)
  MemoryPlanOptions options; ///< every other option; options.layout filled from the layout options
  int64_t memory_per_rank = 0;  ///< --memory-per-rank bytes (0: no verdict)
  std::string format = "text";  ///< --format text|json
};

/// Declares plan's own options (the layout options are added beside them).
void add_plan_options(boost::program_options::options_description& d);

/// Reads them. Throws UsageError naming the option: neither or both of --model-config and
/// --model, no --seq-len, a --format other than text or json, a --device other than cpu
/// or cuda, a --precision other than fp32 or bf16, a size that does not parse (as serve's
/// --kv-cache-memory: "80GB", "80GiB", "1.5G"), --kv-cache-memory without --serve.
PlanRequest read_plan_options(const boost::program_options::variables_map& vm);

/// `olmo2 plan`: prints the plan of every rank (ranks with equal numbers grouped) and
/// the bytes each group sends per step, as text or one JSON object, on `out`. Returns 0,
/// or 1 when --memory-per-rank is given and a rank's total exceeds it (the plan is
/// printed all the same, and one line "olmo2: error: …" on `err` names the rank). Throws
/// InputError for a config that does not load or a layout the model does not divide,
/// and what plan_memory throws (unknown recompute mode, a zero stage with dp 1, …).
int run_plan(const PlanRequest& request, std::ostream& out, std::ostream& err);

}  // namespace olmo2
