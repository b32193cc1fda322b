// `olmo2 trace`: named activations of a file of prompts, without generation, on one
// process or every rank of an MPI job (docs/architecture.md §12, §13).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/commands.h"
#include "launcher/device_options.h"
#include "launcher/placement_log.h"
#include "launcher/rank_errors.h"
#include "launcher/trace_files.h"
#include "parallel/agreement.h"
#include "parallel/mpi_runtime.h"
#include "parallel/process_groups.h"
#include "runtime/generation/trace_prompts.h"
#include "runtime/io/checkpoint_files.h"
#include "runtime/model/model.h"

namespace olmo2 {

namespace {
/// The line of prompt `index`: {"index", "prompt_ids", "activations"}.
void write_line(std::ostream& out, size_t index, const std::vector<int32_t>& ids, nlohmann::json activations) {
  const nlohmann::json line = {{"index", index}, {"prompt_ids", ids}, {"activations", std::move(activations)}};
  out << line.dump() << "\n";
  out.flush();
  if (!out) OLMO2_THROW(InputError, "cannot write the result of prompt ", index);
}
}  // namespace

void run_trace(const CliConfig& cfg, std::ostream& stdout_stream, bool under_mpi_launcher) {
  std::vector<std::vector<int32_t>> prompts;
  trace::TraceSpec spec;
  std::ofstream file;  // --output, written by world rank 0
  auto out = [&]() -> std::ostream& { return cfg.trace.output.empty() ? stdout_stream : file; };
  // Everything about the input, checked alike by every rank before any collective.
  auto check_input = [&](const ModelConfig& c) {
    spec = cfg.trace.spec(c);
    prompts = read_trace_prompts(cfg.trace.prompts, cfg.tokenizer, c);
  };
  const bool layout = cfg.tp > 1 || cfg.pp > 1 || cfg.dp > 1 || !cfg.pp_layers.empty();
  if (!layout && !under_mpi_launcher) {
    place_single_process(cfg.threads);
    const DeviceChoice dev = use_device_of_rank(cfg.device_options, nullptr);
    if (dev.device != Device::CPU) std::cerr << dev.description << std::endl;
    const ModelConfig c = ModelConfig::load(cfg.model);
    check_input(c);
    if (!cfg.trace.output.empty()) file = open_output_file(cfg.trace.output, "--output");
    verify_model_directory(cfg.model, {}, &std::cerr);
    const Olmo2Model model = Olmo2Model::load(cfg.model, ShardSpec::whole(c), cfg.precision, dev.device);
    trace_prompts(model, prompts, spec, {}, {},
                  [&](size_t i, nlohmann::json a) { write_line(out(), i, prompts[i], std::move(a)); });
    return;
  }
  parallel::MpiRuntime mpi;
  const int rank = mpi.world_rank();
  parallel::PartitionPlan plan;
  parallel::Topology topology;
  checks_alike_on_every_rank(mpi, [&] {
    const ModelConfig c = ModelConfig::load(cfg.model);
    topology = parallel::Topology::make(mpi.world_size(), cfg.tp, cfg.pp, cfg.dp_given ? cfg.dp : 0);
    plan = parallel::make_partition_plan(model_shape(c), cfg.tp, cfg.pp, topology.layout().dp, cfg.pp_layers);
    check_input(c);
  });
  report_errors_on_every_rank(rank, [&] {
    parallel::ProcessGroups groups = parallel::make_process_groups(topology, cfg.collective_timeout);
    place_and_log(*groups.world, topology, cfg.threads, std::cerr);
    const DeviceChoice dev = use_device_of_rank(cfg.device_options, &groups);
    if (rank == 0 && dev.device != Device::CPU) std::cerr << dev.description << std::endl;
    parallel::agree(groups.world.get(), [&] {
      if (rank == 0 && !cfg.trace.output.empty()) file = open_output_file(cfg.trace.output, "--output");
      verify_model_directory(cfg.model, {rank, groups.world->size()}, rank == 0 ? &std::cerr : nullptr);
    });
    const Olmo2Model model = Olmo2Model::load(cfg.model, ShardSpec::from_plan(plan, rank), cfg.precision, dev.device);
    const TraceJob job{groups.world.get(), groups.coords().dp, topology.layout().dp};
    trace_prompts(model, prompts, spec, ParallelContext{groups.tp.get(), groups.pp.get()}, job,
                  [&](size_t i, nlohmann::json a) { write_line(out(), i, prompts[i], std::move(a)); });
    groups.world->barrier();
  });
}

}  // namespace olmo2
