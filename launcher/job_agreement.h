// The first thing every rank of an MPI job does: agree that the job is one job
// (docs/architecture.md §12 "One job, every rank"). Each rank's own command-line verdict
// and the options that shape the computation are compared, so that a usage error on
// any rank reaches the user as one line from rank 0, and a rank started with another
// --lr, --steps or --zero-stage than its peers stops the job before any work instead of
// training silently wrong or leaving its peers waiting in a collective.
#pragma once

#include <string>
#include <vector>

#include "launcher/job_options.h"

namespace olmo2 {

/// Collective over MPI_COMM_WORLD (MPI initialised; call it on every rank before anything
/// else talks): `usage_error` is this rank's command-line error ("" when it parsed), and
/// `options` its job_options. When any rank has a usage error, rank 0 prints it once
/// ("olmo2: error: rank R: …" unless every rank has it, then as is) and every rank throws
/// SilentExit{kExitUsage}. Otherwise a 64-bit hash of each rank's options is all-gathered;
/// when they all equal rank 0's this returns; else the options text of every rank is
/// gathered, rank 0 prints the first difference naming the rank, the option and both
/// values, and every rank throws SilentExit{kExitUsage}. CollectiveTimeout after
/// `timeout_s` if a rank never arrives.
void agree_on_the_job(const std::string& usage_error, const std::vector<JobOption>& options, double timeout_s);

}  // namespace olmo2
