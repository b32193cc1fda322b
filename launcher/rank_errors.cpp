#include "launcher/rank_errors.h"

#include <iostream>
#include <string>

#include "launcher/commands.h"
#include "parallel/agreement.h"

namespace olmo2 {

void checks_alike_on_every_rank(parallel::MpiRuntime& mpi, const std::function<void()>& checks) {
  std::string failure;
  bool failed = false;
  try {
    checks();
  } catch (const std::exception& e) {
    failed = true;
    failure = e.what();
  }
  // Files local to each node (a tokenizer, generation_config.json) can fail one rank's
  // checks only: every rank learns the lowest rank that failed, which speaks.
  const int first = mpi.all_reduce_min(failed ? mpi.world_rank() : mpi.world_size());
  if (first == mpi.world_size()) return;
  if (mpi.world_rank() == first) {
    std::cerr << "olmo2: error: " << (first == 0 ? std::string() : "rank " + std::to_string(first) + ": ") << failure
              << std::endl;
  }
  mpi.barrier();
  throw SilentExit{};
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
