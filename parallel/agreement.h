// Decisions every rank of a job takes together, so that no rank is left waiting in a
// collective that its peers skipped: layout and input errors before any work, and skip,
// stop and save decided from reduced values (docs/architecture.md §6 (communicators),
// §7 (training semantics)).
#pragma once

#include <functional>
#include <string>

#include "parallel/communicator.h"

namespace olmo2::parallel {

/// An error every rank of the job raised together (see agree): the launcher prints it
/// once, on rank 0, and every rank exits with the same status without aborting the job.
class AgreedError : public InputError {
 public:
  using InputError::InputError;
};

/// Runs `fn` on this rank, then one all-reduce over `world` (an i32 flag per rank) tells
/// every rank which ranks' `fn` threw. If any did, the message of the lowest such rank
/// is broadcast and every rank throws AgreedError with it: as is when every rank
/// failed, else prefixed "rank R: " (or "rank R (and K other ranks): "). `fn` must not use `world`. With `world` null, `fn`
/// runs and its exceptions pass through unchanged. CollectiveTimeout if a peer never
/// arrives.
void agree(Communicator* world, const std::function<void()>& fn);

/// True on every rank when `flag` is true on any rank of `world` (an i32 all-reduce
/// max); `flag` itself when world is null or of one rank. CollectiveTimeout if a peer
/// never arrives.
bool any_rank(Communicator* world, bool flag);

/// Broadcasts `text` from `root` over `comm`: its length as one i64, then (when not
/// empty) its bytes as u8. Every rank's `text` is replaced by root's. ShapeError for a
/// root outside the group, CollectiveTimeout if a peer never arrives.
void broadcast_string(Communicator& comm, std::string& text, int root);

}  // namespace olmo2::parallel
