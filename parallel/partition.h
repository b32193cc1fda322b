// The partition plan: which rank of a (tp, pp, dp) layout holds which layers, heads,
// weight rows and vocabulary rows, and how many parameters (docs/architecture.md §4
// rank layout, §5 partitioning).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/dtype.h"
#include "parallel/topology.h"

namespace olmo2::parallel {

/// The sizes of an OLMo 2 model the plan needs (element counts; no runtime/ types here,
/// the launcher converts a ModelConfig). `tied_embeddings`: lm_head is embed_tokens.
struct ModelShape {
  int64_t layers = 0;        ///< num_hidden_layers
  int64_t hidden = 0;        ///< hidden_size
  int64_t heads = 0;         ///< num_attention_heads
  int64_t kv_heads = 0;      ///< num_key_value_heads
  int64_t head_dim = 0;      ///< hidden / heads in every OLMo 2 release
  int64_t intermediate = 0;  ///< intermediate_size
  int64_t vocab = 0;         ///< vocab_size (real rows of embed_tokens and lm_head)
  bool tied_embeddings = false;

  /// Parameters of the whole model, as ModelConfig::parameter_count counts them:
  /// embedding, lm_head unless tied, per layer q/k/v/o, q_norm/k_norm, gate/up/down and
  /// two post-norms, and the final norm.
  int64_t parameter_count() const;
};

/// Half-open index range [begin, end).
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

/// What one rank holds. Row ranges index the full (unsplit) HF tensors, `[out, in]`.
struct RankPartition {
  int rank = 0;             ///< world rank (Topology's order: tp fastest, then dp, then pp)
  Coords coords;            ///< tp rank, dp rank and pipeline stage (coords.pp)
  /// Decoder layers of this pipeline rank: its model chunks, ascending — one range of
  /// consecutive layers, or with V virtual stages V ranges (chunk c of stage s is virtual
  /// stage c·pp + s: docs/architecture.md §5 "Interleaved 1F1B").
  std::vector<Range> chunks;
  /// Layers held, over every chunk.
  int64_t layer_count() const {
    int64_t n = 0;
    for (const Range& c : chunks) n += c.size();
    return n;
  }
  bool embedding = false;   ///< holds embed_tokens (stage 0)
  bool final_norm = false;  ///< holds model.norm and lm_head (last stage)
  Range q_heads;            ///< query heads
  Range kv_heads;           ///< kv heads; with kv < tp one head held by several ranks
  int kv_replicas = 1;  ///< ranks holding each of this rank's kv heads (1: split, not replicated)
  int kv_replica = 0;   ///< which of those ranks this one is (0 owns the head, counts its k sum)
  Range q_rows;         ///< q_proj rows = q_norm elements = o_proj columns
  Range kv_rows;        ///< k_proj / v_proj rows = k_norm elements
  Range mlp_rows;       ///< gate_proj / up_proj rows = down_proj columns
  /// This TP rank's vocab-parallel slice: rows of the padded embed_tokens / lm_head, held
  /// where `embedding` or `final_norm` is set (set on every rank; middle stages hold none).
  Range vocab_rows;
  Range vocab_real;  ///< the real token ids in vocab_rows (may be empty); the rest is padding

  /// Model parameter elements this rank stores: its slices of every split tensor, full
  /// copies of replicated ones (post-norms, final norm, a replicated kv head's k/v rows
  /// and k_norm slice, a tied lm_head on the last stage when pp > 1). Vocab padding rows
  /// are not parameters and are not counted.
  int64_t parameters = 0;
  /// The parameters this rank owns: every model parameter has exactly one owner in a DP
  /// replica (TP rank 0 for replicated norms, replica 0 for a replicated kv head, stage 0
  /// for a tied embedding), so these sum to ModelShape::parameter_count over a replica.
  /// What a gradient norm or a checkpoint writer counts once.
  int64_t owned_parameters = 0;
  /// Vocab padding elements stored beside the parameters (rows past the real vocab).
  int64_t padding_elements = 0;

  /// Bytes of weights stored (parameters + padding) at `element_bytes` per element.
  int64_t bytes(int64_t element_bytes) const {
    return (parameters + padding_elements) * element_bytes;
  }
};

/// The whole plan: every rank of the world, in rank order.
struct PartitionPlan {
  ModelShape shape;
  Topology topology;  ///< the layout and its rank order
  /// Layers per pipeline stage: pp entries, each ≥ 1, summing to shape.layers.
  std::vector<int64_t> stage_layers;
  /// Model chunks per pipeline rank (the interleaved schedule's V; 1 = plain 1F1B).
  int virtual_stages = 1;
  int64_t padded_vocab = 0;          ///< vocab rounded up to a multiple of tp
  std::vector<RankPartition> ranks;  ///< world entries; ranks[r].rank == r

  /// The rank at coordinates `c`. Throws ShapeError when a coordinate is out of range.
  const RankPartition& at(const Coords& c) const { return ranks[topology.rank(c)]; }
};

/// Builds the plan for `shape` over the ranks of `topology` (docs/architecture.md §5), the
/// one check of the model's sizes against a layout. `pp_layers` gives the layers per stage
/// explicitly; empty means balanced, earlier stages taking the extra layer (30 over 4 →
/// 8,8,7,7). Query heads, MLP rows and (padded) vocab rows split evenly over TP; kv heads
/// split when kv ≥ tp, each replicated on tp/kv consecutive ranks when kv < tp. Throws
/// InputError, before anything else is done, naming the numbers: heads % tp ≠ 0; kv
/// heads neither divisible by nor dividing tp; intermediate % tp ≠ 0; layers < pp; a
/// pp_layers list with ≠ pp entries, an entry < 1, or a sum ≠ layers; an inconsistent
/// shape (a size < 1, heads % kv heads ≠ 0). The axes and the world are the topology's
/// (Topology::make checked them).
///
/// `virtual_stages` V > 1 (Megatron-LM's virtual pipeline, Narayanan et al. 2021, section 2.2;
/// docs/architecture.md §5 "Interleaved 1F1B"): the layers L split into pp·V equal chunks
/// and virtual stage c·pp + s — chunk c of stage s — holds layers
/// [(c·pp+s)·L/(pp·V), (c·pp+s+1)·L/(pp·V)); stage_layers then counts each stage's layers
/// over its chunks. InputError (naming the numbers) for V < 1, V > 1 with pp 1,
/// L % (pp·V) ≠ 0, or V > 1 with a pp_layers list.
PartitionPlan make_partition_plan(const ModelShape& shape, const Topology& topology,
                                  const std::vector<int64_t>& pp_layers = {}, int virtual_stages = 1);

/// The plan over exactly tp × pp × dp ranks: make_partition_plan(shape,
/// Topology::make(Layout{tp, pp, dp}), pp_layers), whose InputError names an axis < 1 or
/// more than Topology::kMaxWorld ranks.
PartitionPlan make_partition_plan(const ModelShape& shape, int tp, int pp, int dp,
                                  const std::vector<int64_t>& pp_layers = {}, int virtual_stages = 1);

/// The checks of make_partition_plan on `virtual_stages` alone (InputError naming the
/// numbers: V < 1, V > 1 with pp 1, layers % (pp·V) ≠ 0, V > 1 with --pp-layers), for
/// callers that check options before planning.
void check_virtual_stages(int64_t layers, int pp, int virtual_stages, bool pp_layers_given);

/// The chunk map of the interleaved schedule, one line per (stage, chunk) with its
/// virtual stage and layers, e.g. "  stage 0 chunk 1 (virtual stage 2): layers [4,6)".
std::string describe_chunks(const PartitionPlan& plan);

/// Layers per stage, balanced: `layers` over `pp` stages, the first layers % pp stages
/// one layer more (30 over 4 → 8,8,7,7; 6 over 4 → 2,2,1,1). Throws InputError when
/// pp < 1 or layers < pp.
std::vector<int64_t> balanced_stage_layers(int64_t layers, int pp);

/// A multi-line, human-readable plan: the layout, stages, how heads and vocab split,
/// then one row per rank (coordinates, layers, heads, kv replication, row ranges,
/// parameters held and bytes at `dtype`).
std::string describe(const PartitionPlan& plan, DType dtype = DType::F32);

}  // namespace olmo2::parallel
