// olmo2: one binary, subcommands (docs/architecture.md §12). Every error ends here as one line on
// stderr and a non-zero exit: 2 for a bad command line, 1 for anything else; a training
// run stopped early with a checkpoint exits 75 (launcher/exit_status.h).
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "launcher/commands.h"
#include "launcher/exit_status.h"
#include "launcher/job_agreement.h"
#include "launcher/options.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/bf16_gemm.h"
#include "ops/blas_core.h"
#include "parallel/agreement.h"
#include "parallel/mpi_runtime.h"
#include "parallel/process_groups.h"

namespace {
/// True when mpirun (Open MPI) or srun/PMIx started this process: then `generate` and
/// `trace` join the MPI job even without layout options. (The one place that reads the
/// launcher's environment.)
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(v)) return true;
  }
  return false;
}


/// This process's rank in the job mpirun or srun started (0 when none did): before MPI
/// is initialised, a command-line error is printed by rank 0 only, not once per rank.
long rank_from_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* s = std::getenv(v)) return std::strtol(s, nullptr, 10);
  }
  return 0;
}

/// Runs `check` on this rank; when it throws (on any rank of an MPI job: one agreement
/// over the world), rank 0 prints the message once and every rank leaves with `status`.
void preflight_on_every_rank(bool mpi_job, const std::function<void()>& check, int status, double timeout_s) {
  using namespace olmo2;
  if (!mpi_job) {
    try {
      check();
    } catch (const InputError& e) {
      std::cerr << "olmo2: error: " << e.what() << "\n";
      throw SilentExit{status};
    }
    return;
  }
  const std::unique_ptr<parallel::Communicator> world = parallel::make_world_communicator(timeout_s);
  try {
    parallel::agree(world.get(), check);
  } catch (const parallel::AgreedError& e) {
    if (world->rank() == 0) std::cerr << "olmo2: error: " << e.what() << "\n";
    world->barrier();
    throw SilentExit{status};
  }
}

/// Flushes stdout; a full disk or a closed pipe must not look like success.
int finish_output() {
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "olmo2: error: cannot write to standard output\n";
    return 1;
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace olmo2;
  restart_with_blas_kernels(argv);  // before anything starts: OpenBLAS on this CPU's kernels
  const std::string command = argc > 1 ? argv[1] : "";
  const bool mpi_command = command == "train" || command == "generate" || command == "trace" || command == "serve";
  // Under mpirun or srun every rank of these commands first agrees that the job is one
  // job (launcher/job_agreement.h): a usage error on any rank, options that differ, a
  // bad product-path override or a missing GPU on any rank stop every rank together.
  const bool mpi_job = mpi_command && launched_by_mpi();
  std::optional<parallel::MpiRuntime> mpi;
  try {
    CliConfig cfg;
    std::string usage_error;
    try {
      cfg = parse_command_line(argc, argv);
    } catch (const UsageError& e) {
      if (!mpi_job) throw;
      usage_error = e.what();
    }
    if (mpi_job) {
      mpi.emplace();
      agree_on_the_job(usage_error, cfg.job_options, cfg.layout.collective_timeout);
    }
    if (cfg.help) {
      std::cout << cfg.help_text;
      return finish_output();
    }
    if (mpi_command) {
      // A product-path override that names no path (OLMO2_BF16_GEMM,
      // OLMO2_BATCH_INVARIANT_GEMM) is refused before any work: one line, from rank 0
      // only, and status 1 on every rank. --device cuda in a build without CUDA or where
      // a process sees no GPU: one line from rank 0, status 2, before a file is read.
      preflight_on_every_rank(mpi_job, [] {
        ops::bf16_gemm_path();
        ops::batch_invariant_path();
      }, kExitFailed, cfg.layout.collective_timeout);
      preflight_on_every_rank(mpi_job, [&] { check_device_available(cfg.device_options.device); }, kExitUsage,
                              cfg.layout.collective_timeout);
    }
    int status = kExitFinished;
    if (cfg.command == "info") run_info(cfg, std::cout);
    else if (cfg.command == "plan") status = run_plan(cfg.plan, std::cout, std::cerr);
    else if (cfg.command == "generate") run_generate(cfg, std::cout, launched_by_mpi());
    else if (cfg.command == "trace") run_trace(cfg, std::cout, launched_by_mpi());
    else if (cfg.command == "train") status = run_train(cfg, launched_by_mpi());
    else if (cfg.command == "serve") run_serve(cfg, launched_by_mpi());  // a signal stop is a finish
    else if (cfg.command == "tokenize") run_tokenize(cfg, std::cin, std::cout, std::cerr);
    const int output = finish_output();
    return output != kExitFinished ? output : status;
  } catch (const SilentExit& e) {
    return e.status;
  } catch (const UsageError& e) {
    if (rank_from_launcher() == 0) std::cerr << "olmo2: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "olmo2: error: " << e.what() << "\n";
    return kExitFailed;
  }
}
