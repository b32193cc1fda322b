// The start-up of a rank, written once for every command that runs on ranks (info's
// plan, generate, trace, train, serve): the layout options → the topology, the partition
// plan, the process groups, the placement, the device and this rank's shard
// (docs/architecture.md §4 rank layout, §12 command line "The rank session"). One
// process without MPI is the 1 × 1 × 1 case of the same sequence.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "launcher/device_options.h"
#include "launcher/layout_options.h"
#include "launcher/model_directory.h"
#include "parallel/partition.h"
#include "parallel/process_groups.h"
#include "parallel/topology.h"
#include "runtime/model/config.h"
#include "runtime/model/quantized_weights.h"
#include "runtime/model/shard_spec.h"

namespace olmo2 {

/// The topology of `layout` on a job of `world` ranks: Topology::make(world, tp, pp, dp
/// (0 when not given: world / (tp · pp · cp)), max_dp, cp). `world` 0: no job, exactly the ranks
/// the layout names, tp × pp × dp with dp 1 when not given (info's plan):
/// Topology::make(Layout). Throws InputError as those do, one message per mistake naming
/// the numbers ("invalid layout: world 4 is not divisible by tp 3 × pp 1 = 3 …").
parallel::Topology rank_topology(const LayoutOptions& layout, int world, int max_dp = 0);

/// The partition plan of `config` over rank_topology(layout, world, max_dp), with
/// layout.pp_layers (docs/architecture.md §5): the one place a command plans its model.
/// Throws InputError as rank_topology, then as make_partition_plan for a model the layout
/// cannot split ("num_attention_heads 40 is not divisible by tp 16").
parallel::PartitionPlan rank_plan(const LayoutOptions& layout, int world, const ModelConfig& config, int max_dp = 0);

/// What a command asks of its rank session.
struct RankSessionSpec {
  LayoutOptions layout;             ///< --tp --pp --dp --pp-layers --collective-timeout
  int threads = 0;                  ///< --threads (0: the placement rule, docs/architecture.md §7)
  DeviceOptions device;             ///< --device, --share-gpu
  bool under_mpi_launcher = false;  ///< mpirun or srun started the process: an MPI job even at 1 × 1 × 1
  int max_dp = 0;                   ///< most data-parallel replicas the command runs (serve: 1); 0: any
  /// The model directory whose config.json the session loads and plans over; "" for a
  /// command that plans its own (train: the Trainer's config may be a resumed checkpoint's).
  std::string model;
  /// generate, trace, serve: the model directory's generation_config.json and the check of
  /// its special ids against the tokenizer (read_model_directory), made by every rank
  /// alike after config.json; nullopt: config.json only (train, info).
  std::optional<ModelDirectoryReading> directory;
  /// The command's own checks of its input against the model's config (generate: the
  /// prompt; trace: the prompts file) and what read_model_directory found, made by every
  /// rank alike with the layout's; may be empty. Only called with a model.
  std::function<void(const ModelConfig&, const ModelDirectoryFindings&)> checks;
  /// generate, trace: rank 0 writes a GPU's description line to stderr once it is chosen
  /// (train and serve name the device in their start lines instead).
  bool print_device = false;
  /// generate, trace, serve: --weights int8|int4 (nullopt: dense). Its group is checked
  /// against every rank's shard with the layout (check_quantization), so that a group a
  /// row-parallel shard's K does not divide stops every rank alike before any weight is read.
  std::optional<WeightQuantization> weights;
};

struct CliConfig;
/// The part of a spec every command fills alike from its parsed command line: the
/// layout options, --threads and the device options; the caller adds its model, checks,
/// max_dp and print_device.
RankSessionSpec rank_session_spec(const CliConfig& cfg, bool under_mpi_launcher);

/// One rank's part of a job, as the rank session made it.
struct RankSession {
  parallel::Topology topology;                       ///< the layout; 1 × 1 × 1 on one process
  std::unique_ptr<parallel::ProcessGroups> groups;   ///< null on one process (no MPI)
  /// spec.model's config.json (absent without a model), with generation_config.json's
  /// stop ids added when spec.directory reads it
  std::optional<ModelConfig> config;
  ModelDirectoryFindings directory;                  ///< read_model_directory's (empty without spec.directory)
  std::optional<parallel::PartitionPlan> plan;       ///< config's plan over topology (with a model)
  ShardSpec shard;                                   ///< this rank's part of plan (ShardSpec::whole on one process)
  /// One process: what the start lines of train and serve say of its threads, "1 process
  /// on HOST, 8 threads from SLURM_CPUS_PER_TASK" (place_single_process). Under MPI rank
  /// 0 has printed the per-host placement lines instead, and this is "".
  std::string placement;
  DeviceChoice device;  ///< the device this rank computes on (use_device_of_rank)

  /// True on every rank of an MPI job, false on one process.
  bool distributed() const { return groups != nullptr; }
  /// This rank's world rank (0 on one process).
  int rank() const;
  /// Ranks in the job (1 on one process).
  int world_size() const { return topology.world(); }
  /// This rank's coordinates ({0, 0, 0} on one process).
  parallel::Coords coords() const { return topology.coords(rank()); }
  /// The world communicator; null on one process (parallel::agree then just runs).
  parallel::Communicator* world() const { return groups ? groups->world.get() : nullptr; }
  /// The tp, pp and cp groups a sharded computation uses; empty on one process.
  ParallelContext parallel_context() const;
};

/// Runs one rank of a command: the start-up sequence, then `body` with its session.
///
/// 1. Checks every rank makes alike before any communication: spec.model's config.json,
///    rank_topology (the world is MPI's, 1 on one process), rank_plan, spec.checks.
/// 2. Under MPI, the process groups (make_process_groups, spec.layout.collective_timeout)
///    and the placement (place_and_log: rank 0 prints the per-host lines); on one process
///    the thread count alone (place_single_process, into `placement`).
/// 3. The device (use_device_of_rank; collective under MPI), with spec.print_device its
///    line; the shard (ShardSpec::from_plan, which for 1 × 1 × 1 equals whole).
/// 4. `body`; then under MPI a barrier of the world group, the groups freed, and a
///    barrier of MPI_COMM_WORLD, so that no rank leaves before every rank let go of them.
///
/// An MPI job is a layout that splits (LayoutOptions::splits) or spec.under_mpi_launcher;
/// MPI is initialised here (parallel::MpiRuntime) unless main did. Errors: on one process
/// every exception passes through unchanged (main prints it). Under MPI a failed check of
/// step 1 is printed once by rank 0 and every rank throws SilentExit
/// (checks_alike_on_every_rank); later an AgreedError is printed once and becomes
/// SilentExit, and any other exception is printed with its rank and ends the job through
/// MPI_Abort (report_errors_on_every_rank), `body`'s included.
void run_rank_session(const RankSessionSpec& spec, const std::function<void(RankSession&)>& body);

}  // namespace olmo2
