// How a subcommand running on every rank of an MPI job reports errors, so that one
// message is printed and no rank is left waiting for a peer that has gone.
#pragma once

#include <functional>

#include "parallel/mpi_runtime.h"

namespace olmo2 {

/// Runs `checks` that every rank makes alike before any communication (options, layout,
/// config.json, the model directory's other files), then one all-reduce over
/// MPI_COMM_WORLD: when any rank's checks threw, the lowest such rank prints its error
/// once (prefixed "rank R: " unless R is 0 — a file that differs between nodes fails some
/// ranks only), every rank meets at a barrier (nobody exits before the message is out)
/// and throws SilentExit.
void checks_alike_on_every_rank(parallel::MpiRuntime& mpi, const std::function<void()>& checks);

/// Runs the part of a subcommand that may fail on some ranks only. An AgreedError (every
/// rank threw it together, parallel::agree) is printed once by rank 0 and becomes
/// SilentExit; SilentExit passes through; any other exception is printed with `rank` and
/// ends the whole job through MPI_Abort.
void report_errors_on_every_rank(int rank, const std::function<void()>& body);

}  // namespace olmo2
