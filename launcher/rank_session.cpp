#include "launcher/rank_session.h"

#include <algorithm>
#include <iostream>

#include "launcher/options.h"
#include "launcher/placement_log.h"
#include "launcher/rank_errors.h"
#include "parallel/mpi_runtime.h"

namespace olmo2 {

parallel::Topology rank_topology(const LayoutOptions& layout, int world, int max_dp) {
  if (world == 0) {
    return parallel::Topology::make(parallel::Layout{layout.tp, layout.pp, std::max(layout.dp, 1), layout.cp});
  }
  return parallel::Topology::make(world, layout.tp, layout.pp, layout.dp, max_dp, layout.cp);
}

parallel::PartitionPlan rank_plan(const LayoutOptions& layout, int world, const ModelConfig& config, int max_dp) {
  return parallel::make_partition_plan(model_shape(config), rank_topology(layout, world, max_dp), layout.pp_layers,
                                     layout.pp_virtual);
}

RankSessionSpec rank_session_spec(const CliConfig& cfg, bool under_mpi_launcher) {
  RankSessionSpec spec;
  spec.layout = cfg.layout;
  spec.threads = cfg.threads;
  spec.device = cfg.device_options;
  spec.under_mpi_launcher = under_mpi_launcher;
  spec.weights = cfg.weights;
  if (cfg.command == "generate" || cfg.command == "trace" || cfg.command == "serve") spec.directory = cfg.directory;
  return spec;
}

int RankSession::rank() const { return groups ? groups->world->rank() : 0; }

ParallelContext RankSession::parallel_context() const {
  return groups ? ParallelContext{groups->tp.get(), groups->pp.get(), groups->cp.get()} : ParallelContext{};
}

namespace {
/// Step 1 of run_rank_session: the config, the topology over `world` ranks, the plan and
/// the command's checks.
void check_alike(const RankSessionSpec& spec, int world, RankSession& s) {
  if (!spec.model.empty()) s.config = ModelConfig::load(spec.model);
  s.topology = rank_topology(spec.layout, world, spec.max_dp);
  if (!s.config) return;
  s.plan = parallel::make_partition_plan(model_shape(*s.config), s.topology, spec.layout.pp_layers,
                                         spec.layout.pp_virtual);
  if (spec.directory) s.directory = read_model_directory(spec.model, *s.config, *spec.directory);
  if (spec.checks) spec.checks(*s.config, s.directory);
  if (spec.weights) {
    for (int r = 0; r < s.topology.world(); ++r) {
      try {
        check_quantization(*s.config, ShardSpec::from_plan(*s.plan, r), *spec.weights);
      } catch (const InputError& e) {
        OLMO2_THROW(InputError, "--weights ", ops::quant_format_name(spec.weights->format), ": ", e.what());
      }
    }
  }
}

/// Rank 0, after step 1: the special-id mismatches read_model_directory found.
void print_warnings(const RankSession& s) {
  for (const std::string& w : s.directory.warnings) std::cerr << "warning: " << w << "\n";
  if (!s.directory.warnings.empty()) {
    std::cerr << "warning: the ids are used as given; --strict-special-tokens makes this an error"
              << std::endl;
  }
}

/// Step 3: the device (after the groups, whose node-local rank picks the GPU) and the shard.
void choose_device(const RankSessionSpec& spec, RankSession& s) {
  s.device = use_device_of_rank(spec.device, s.groups.get());
  if (spec.print_device && s.rank() == 0 && s.device.device != Device::CPU) {
    std::cerr << s.device.description << std::endl;
  }
  if (s.plan) s.shard = ShardSpec::from_plan(*s.plan, s.rank());
}
}  // namespace

void run_rank_session(const RankSessionSpec& spec, const std::function<void(RankSession&)>& body) {
  if (!spec.layout.splits() && !spec.under_mpi_launcher) {  // one process: 1 × 1 × 1, no MPI
    RankSession s;
    check_alike(spec, 1, s);
    print_warnings(s);
    s.placement = place_single_process(spec.threads);
    choose_device(spec, s);
    body(s);
    return;
  }
  parallel::MpiRuntime mpi;
  RankSession s;  // after the runtime: its communicators go first, however this ends
  const int rank = mpi.world_rank();
  checks_alike_on_every_rank(mpi, [&] { check_alike(spec, mpi.world_size(), s); });
  if (rank == 0) print_warnings(s);
  report_errors_on_every_rank(rank, [&] {
    s.groups = std::make_unique<parallel::ProcessGroups>(
        parallel::make_process_groups(s.topology, spec.layout.collective_timeout));
    place_and_log(*s.groups->world, s.topology, spec.threads, std::cerr);
    choose_device(spec, s);
    body(s);
    s.groups->world->barrier();
    s.groups.reset();
  });
  // Every rank has let go of its groups (and whatever body held) before any leaves.
  mpi.barrier();
}

}  // namespace olmo2
