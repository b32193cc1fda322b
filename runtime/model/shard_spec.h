// What one rank holds of the model, and the process groups a sharded computation uses
// (docs/architecture.md §4–5).
#pragma once

#include <vector>

#include "parallel/communicator.h"
#include "parallel/partition.h"
#include "runtime/model/config.h"

namespace olmo2 {

/// What one rank holds of the model; `whole` for a single process. Ranges index the full
/// model: layers, query heads, kv heads, MLP rows, vocab rows of the padded
/// embedding/lm_head (`vocab_real` the real ids among them).
///
/// Layers: `chunks` are the model chunks of this pipeline rank, ascending and disjoint —
/// one range for plain 1F1B, V non-adjacent ranges with the interleaved schedule
/// (docs/architecture.md §5 "Interleaved 1F1B"). The rank's layer weights are numbered
/// locally 0, 1, … through the chunks in order; global_layer() is the one mapping of a
/// local index to the model's layer id.
struct ShardSpec {
  std::vector<parallel::Range> chunks;  ///< model chunks of this rank (global layer ranges), ≥ 1 entry
  parallel::Range q_heads, kv_heads, mlp_rows, vocab_rows, vocab_real;
  bool embedding = true;   ///< stage 0: embed_tokens
  bool final_norm = true;  ///< last stage: model.norm and lm_head
  bool k_counts = true;    ///< this rank contributes its k sum to the QK-norm all-reduce
  int kv_replicas = 1;     ///< TP ranks holding this rank's kv heads (> 1 when KV < tp)
  int kv_replica = 0;      ///< which of them this rank is (0 owns the head; k_counts)
  int64_t padded_vocab = 0;
  /// Layers held, over every chunk.
  int64_t layer_count() const;
  /// The model's layer id of local layer `local` (0 ≤ local < layer_count(); Error otherwise).
  int64_t global_layer(int64_t local) const;
  /// The local index of model layer `global` (Error when this rank does not hold it).
  int64_t local_layer(int64_t global) const;
  /// Local indices [begin, end) of chunk `c`'s layers (Error when c is not a chunk).
  parallel::Range chunk_locals(int c) const;
  /// The whole model on one rank.
  static ShardSpec whole(const ModelConfig& c);
  /// This rank's part of `plan`.
  static ShardSpec from_plan(const parallel::PartitionPlan& plan, int rank);
};

/// The communicators a sharded computation uses; null members (or groups of one rank)
/// mean "not split that way".
struct ParallelContext {
  parallel::Communicator* tp = nullptr;  ///< tensor-parallel group
  parallel::Communicator* pp = nullptr;  ///< pipeline group (stage = pp->rank())
  /// context-parallel group: each sequence's rows are split over it in the zigzag order
  /// and attention runs as ring attention (docs/architecture.md §7 "Context parallelism")
  parallel::Communicator* cp = nullptr;
  /// tp when it has more than one rank, else null.
  parallel::Communicator* tensor_parallel() const { return tp && tp->size() > 1 ? tp : nullptr; }
  /// pp when it has more than one rank, else null.
  parallel::Communicator* pipeline() const { return pp && pp->size() > 1 ? pp : nullptr; }
  /// cp when it has more than one rank, else null.
  parallel::Communicator* context_parallel() const { return cp && cp->size() > 1 ? cp : nullptr; }
};

}  // namespace olmo2
