// Subcommands of the olmo2 binary. generate, trace, train and serve start every rank through
// run_rank_session, info plans through rank_plan (launcher/rank_session.h).
#pragma once

#include <istream>
#include <ostream>

#include "launcher/options.h"
#include "parallel/partition.h"
#include "runtime/model/config.h"

namespace olmo2 {

/// `olmo2 info`: the configuration and parameter count, from config.json alone; with
/// --tp/--pp/--dp/--pp-layers also the partition plan per rank (rank_plan over the
/// layout's own tp × pp × dp ranks, parallel::describe). Throws InputError for a bad
/// config.json or a layout the model cannot be split into.
void run_info(const CliConfig& cfg, std::ostream& out);

/// `olmo2 generate`: loads the model and prints greedy output ids (text or JSON).
/// Under mpirun/srun or with a layout (--tp/--pp/--dp/--pp-layers) it runs sharded:
/// each rank loads its slices, rank 0 prints. Errors every rank sees alike (config,
/// layout, prompt) are reported once, by rank 0, and every rank exits 1 (by throwing
/// SilentExit); a later error on any rank is printed with its rank and ends the
/// job through MPI_Abort, so no peer hangs.
void run_generate(const CliConfig& cfg, std::ostream& out, bool under_mpi_launcher);

/// `olmo2 trace` (docs/architecture.md §13): --prompts FILE (JSON Lines of {"prompt"} or
/// {"prompt_ids"}), one forward per prompt with --interventions applied, and one JSON line
/// {"index", "prompt_ids", "activations"} per prompt, in file order, on --output FILE or
/// `out`, written by rank 0. Sharded as run_generate (data-parallel replicas take turns
/// over the prompts). The options, the prompts file and the --activations/--interventions
/// names are checked by every rank alike before any collective: an error names the line
/// and field (or the JSON field) and every rank exits 1 (SilentExit; InputError on one
/// process). Later errors on one rank end the job through MPI_Abort.
void run_trace(const CliConfig& cfg, std::ostream& out, bool under_mpi_launcher);

/// `olmo2 train`: builds the Trainer (every check before any work), then runs it;
/// SIGTERM, SIGINT and SIGUSR1 (mpirun forwards SIGUSR1 to every rank) stop it after the
/// current step with a checkpoint (when --save-dir is set). Returns the exit status
/// (launcher/exit_status.h), the same on every rank: kExitFinished when --steps were
/// taken, kExitStoppedEarly after a stop that wrote its checkpoint, kExitFailed (rank 0
/// says "stopped at step N without a checkpoint (no --save-dir)") after a stop without
/// a save directory. On one process unless a
/// layout option is given or `under_mpi_launcher`; then on every rank of the MPI job:
/// errors every rank sees alike (options, layout, data, checkpoint, a non-finite stop)
/// are printed once by rank 0 and every rank exits 1 (SilentExit); anything else is
/// printed with its rank and ends the job through MPI_Abort. Throws InputError for bad
/// options or data, TrainingStopped.
int run_train(const CliConfig& cfg, bool under_mpi_launcher = false);

/// `olmo2 serve`: the OpenAI-style completions server (runtime/serve/api/http_server.h) on
/// --host:--port, until SIGTERM, SIGINT or SIGUSR1 (mpirun forwards SIGUSR1 to every
/// rank): then it stops accepting, lets in-flight requests finish for --shutdown-grace
/// seconds, cancels the rest, and every rank returns normally. On one process unless
/// --tp/--pp/--pp-layers splits the model or `under_mpi_launcher`; then the world must be
/// tp × pp ranks (the rank session's max_dp 1: no data parallelism), each loading its
/// shard, rank 0 serving HTTP. Start-up errors every
/// rank sees are printed once by rank 0 (SilentExit); later ones on one rank abort the
/// job with the rank named. Throws InputError for a bad model directory, a cache too
/// small for one block, a port that cannot be bound.
void run_serve(const CliConfig& cfg, bool under_mpi_launcher);

/// Thrown after an error that has already been reported: exit with `status` (1, or 2 for
/// a command line refused on every rank) quietly.
struct SilentExit {
  int status = 1;
};

/// `olmo2 tokenize`: documents → .npy token files (progress on a terminal, summary
/// always, on `err`), or with --ids stdin text → a JSON array of ids on `out`.
void run_tokenize(const CliConfig& cfg, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace olmo2
