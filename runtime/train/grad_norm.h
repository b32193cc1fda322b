// The global gradient norm of a sharded model, what clipping uses
// (docs/architecture.md §11.5 grad norm with sharded and replicated parameters).
#pragma once

#include <vector>

#include "parallel/communicator.h"
#include "runtime/model/parameters.h"

namespace olmo2 {

/// L2 norm of every gradient of the model held across the ranks of a TP group and a
/// pipeline group. Sharded parameters count each shard once; TP-replicated ones
/// (post-norm gains, the final norm: Parameter::tp_replicated) once in total — only TP
/// rank 0 adds them — not once per rank (docs/architecture.md §11.5: √34 = 5.8310, not
/// √59); a kv head replicated over TP ranks (after sum_kv_replica_gradients) only on its
/// first replica. Each rank sums its squares in fp64; the sum crosses ranks as one f64,
/// an all-reduce over `tp` (which may be null or of size 1). With a pipeline (`pp` of
/// more than one rank) the squares are summed per unit — the embedding, each decoder
/// layer, the tail — those sums cross ranks as a vector (an i64 max all-reduce over `pp`
/// agrees its length first) and are added in the model's order, so that the norm does not
/// depend on which stage holds which layer (the interleaved schedule's chunks:
/// docs/architecture.md §5 "Interleaved 1F1B"). DP
/// replicas hold identical, already reduced gradients and are not summed — unless
/// `dp_chunks` is given: then `params` are this rank's ZeRO gradient chunks (stages 2 and
/// 3, DataParallelAdamW::chunk_parameters), disjoint over DP, and the sum is all-reduced
/// over `dp_chunks` too (docs/architecture.md §7 "ZeRO stages"). Every rank returns the
/// same value. Throws CollectiveTimeout if a peer never joins.
double global_grad_norm(const std::vector<Parameter>& params, parallel::Communicator* tp,
                        parallel::Communicator* pp, parallel::Communicator* dp_chunks = nullptr);

}  // namespace olmo2
