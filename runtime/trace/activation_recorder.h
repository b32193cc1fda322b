// Reading and changing named activations inside a forward, on every rank
// (docs/architecture.md §13): the ForwardTap that applies a batch's interventions and
// records this rank's share of its reads, reduced before anything crosses ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/model/forward_tap.h"
#include "runtime/model/shard_spec.h"
#include "runtime/trace/piece_format.h"
#include "runtime/trace/trace_spec.h"

namespace olmo2::trace {

/// One sequence of a forward's batch as the tap sees it.
struct TracedSequence {
  const TraceSpec* spec = nullptr;  ///< null: neither read nor changed
  int32_t tag = 0;                  ///< carried by its pieces (the engine's plan position)
  /// Positions below this one are not recorded again (already recorded before a
  /// pre-emption's recomputation, which gives the same bits); interventions still apply.
  int64_t record_from = 0;
};

/// The tap of one forward (one micro-batch) on one rank: `sequences` in the batch's
/// order. Interventions are applied before the reads of the same site (a read sees what
/// the rest of the model sees), except attention_head_outputs, the attention function's
/// own output, read before a head is ablated (attention_premix, o_proj's input, after). What this rank records:
///   - columns it holds: its query heads, its kv heads when it owns them (kv_replica 0),
///     its MLP rows, its real vocab rows; replicated residual columns on TP rank 0 only;
///   - per read's reduce: None the rows themselves, Norm each row's (per head) partial sum
///     of squares, Mean the sum over its rows per column;
/// serialized as pieces (header words, bit-cast, then floats) that ActivationStore reads.
class ActivationRecorder final : public ForwardTap {
 public:
  ActivationRecorder(const ModelConfig& config, const ShardSpec& shard, int tp_rank,
                     std::vector<TracedSequence> sequences);
  bool wants(TapSite site, int64_t layer) const override;
  void at(TapSite site, int64_t layer, const TapRows& where, const TensorView& rows) override;
  bool wants_attention(int64_t layer, size_t seq) const override;
  void attention(int64_t layer, const TapRows& where, size_t seq, const TensorView& q, const TensorView& keys,
                 int64_t keys_first, int64_t window) override;
  /// Whether any sequence is traced (a forward without traced sequences needs no tap).
  bool active() const;
  /// This rank's pieces so far (appended to by every call).
  const std::vector<float>& pieces() const { return pieces_; }

 private:
  /// The columns of `site` this rank reports.
  ColumnShare share(TapSite site) const;
  /// Appends a piece of `count` rows (row t at rows + t·stride) reduced per hdr.reduce.
  void append_rows(PieceHeader hdr, const ColumnShare& c, const float* rows, int64_t stride, int64_t count);

  const ModelConfig& config_;
  const ShardSpec& shard_;
  int tp_rank_;
  std::vector<TracedSequence> sequences_;
  std::vector<float> pieces_;
};

/// Every rank of `world` calls it with its pieces; world rank 0 gets every rank's pieces
/// concatenated (its own first), the others an empty vector. One all-gather of the sizes,
/// then a send from each rank with pieces (only what was recorded crosses ranks). Throws
/// CollectiveTimeout if a peer never joins.
std::vector<float> gather_pieces(parallel::Communicator& world, const std::vector<float>& local);

/// Rank 0: one request's reads, assembled from the pieces of every step and rank.
class ActivationStore {
 public:
  ActivationStore(std::shared_ptr<const TraceSpec> spec, const ModelConfig& config);
  /// Adds the pieces of `pieces` whose tag is `tag`; others are skipped. Throws Error on a
  /// malformed piece.
  void add(std::span<const float> pieces, int32_t tag);
  /// The response's `activations` object: per key (ActivationRead::key) {"shape", "dtype":
  /// "float32", "positions": [first, end), "reduce", "data": base64 of the little-endian
  /// f32 values in nnterp's layout (read_shape)}.
  nlohmann::json result() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace olmo2::trace
