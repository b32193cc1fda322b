// Data-parallel gradient synchronisation: sum every gradient over the DP group.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/model/parameters.h"

namespace olmo2 {

/// Sums every parameter's gradient over the data-parallel group `dp`, in place, so
/// that every replica holds the same total. The gradients, taken in parameter order
/// as one flat f32 sequence, are cut into buckets of at most `bucket_bytes` (a large
/// tensor spans several buckets, small ones share one), each packed into one buffer
/// and summed with one all-reduce — ceil(total bytes / bucket_bytes) collectives, the
/// same on every rank. The caller scales by 1/(global target count) before or after
/// (docs/architecture.md §7 (training semantics): the token count is reduced across
/// ranks, never averages of averages).
/// No-op for a group of one. Throws InputError for bucket_bytes < 4, CollectiveTimeout
/// if a peer never joins. Source: PyTorch DDP's gradient buckets (25 MiB default).
void all_reduce_gradients(std::vector<Parameter>& params, parallel::Communicator& dp,
                          int64_t bucket_bytes = int64_t{25} << 20);

/// Sums doubles over `c` in place with one f64 all-reduce (MPI_DOUBLE): loss sums,
/// squared norms, norm sums. Each rank's value and the result are IEEE doubles; the sum
/// is as exact as f64 addition in the transport's order (integers below 2^53 exactly;
/// counts that must be exact whatever their size go as i64, see global_target_count).
/// No-op for null or a group of one. CollectiveTimeout if a peer never joins.
/// docs/architecture.md §6 (communicators), §7 (training semantics).
void all_reduce_doubles(parallel::Communicator* c, std::vector<double>& values);

/// Under TP with KV < tp a kv head lives on kv_replicas consecutive ranks, and each
/// holds a partial gradient of its k_proj, v_proj and k_norm (from its own query heads;
/// see forward_backward). This sums those partials over each replica set, in place, so
/// every replica holds the full gradient: one all-reduce over `tp` of a buffer with a
/// slot per kv head of the whole model's k/v/k_norm gradients for this rank's layers,
/// each rank filling the slot of its head. No-op (no collective) when nothing is
/// replicated — the same on every rank of the group. CollectiveTimeout if a peer never
/// joins. Gradients add linearly, so one call after all micro-batches suffices.
void sum_kv_replica_gradients(std::vector<Parameter>& params, parallel::Communicator& tp);

}  // namespace olmo2
