// olmo2: one binary, subcommands (docs/architecture.md §12). Every error ends here as one line on
// stderr and a non-zero exit: 2 for a bad command line, 1 for anything else; a training
// run stopped early with a checkpoint exits 75 (launcher/exit_status.h).
#include <cstdlib>
#include <iostream>

#include "launcher/commands.h"
#include "launcher/exit_status.h"
#include "launcher/options.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/bf16_gemm.h"
#include "ops/blas_core.h"

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
  try {
    const CliConfig cfg = parse_command_line(argc, argv);
    if (cfg.help) {
      std::cout << cfg.help_text;
      return finish_output();
    }
    if (cfg.command == "train" || cfg.command == "generate" || cfg.command == "trace" || cfg.command == "serve") {
      // A product-path override that names no path (OLMO2_BF16_GEMM,
      // OLMO2_BATCH_INVARIANT_GEMM) is refused before any work or rank starts: one line,
      // from rank 0 only, and status 1 on every rank.
      try {
        ops::bf16_gemm_path();
        ops::batch_invariant_path();
      } catch (const InputError& e) {
        if (rank_from_launcher() == 0) std::cerr << "olmo2: error: " << e.what() << "\n";
        return 1;
      }
      // --device cuda in a build without CUDA or where this process sees no GPU: a
      // UsageError (one line from rank 0, status 2) before MPI starts or a file is read.
      check_device_available(cfg.device_options.device);
    }
    int status = kExitFinished;
    if (cfg.command == "info") run_info(cfg, std::cout);
    else if (cfg.command == "generate") run_generate(cfg, std::cout, launched_by_mpi());
    else if (cfg.command == "trace") run_trace(cfg, std::cout, launched_by_mpi());
    else if (cfg.command == "train") status = run_train(cfg, launched_by_mpi());
    else if (cfg.command == "serve") run_serve(cfg, launched_by_mpi());  // a signal stop is a finish
    else if (cfg.command == "tokenize") run_tokenize(cfg, std::cin, std::cout, std::cerr);
    const int output = finish_output();
    return output != kExitFinished ? output : status;
  } catch (const SilentExit&) {
    return kExitFailed;
  } catch (const UsageError& e) {
    if (rank_from_launcher() == 0) std::cerr << "olmo2: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "olmo2: error: " << e.what() << "\n";
    return kExitFailed;
  }
}
