#include "launcher/rank_errors.h"

#include <iostream>

#include "launcher/commands.h"
#include "parallel/agreement.h"

namespace olmo2 {

void checks_alike_on_every_rank(parallel::MpiRuntime& mpi, const std::function<void()>& checks) {
  try {
    checks();
  } catch (const std::exception& e) {
    if (mpi.world_rank() == 0) std::cerr << "olmo2: error: " << e.what() << std::endl;
    mpi.barrier();
    throw SilentExit{};
  }
}

void report_errors_on_every_rank(int rank, const std::function<void()>& body) {
  try {
    body();
  } catch (const parallel::AgreedError& e) {  // every rank threw it: one message, status 1
    if (rank == 0) std::cerr << "olmo2: error: " << e.what() << std::endl;
    throw SilentExit{};
  } catch (const std::exception& e) {
    std::cerr << "olmo2: error: [rank " << rank << "] " << e.what() << std::endl;
    parallel::MpiRuntime::abort(1);
  }
}

}  // namespace olmo2
