// A batch of token sequences as every forward takes it, and packed into one tensor of
// rows (what the decoder layers run on).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ops/tensor.h"
#include "runtime/model/config.h"

namespace olmo2 {

struct ContextShard;  // runtime/model/ring_attention.h

/// Sequences of new tokens, with (when a KV cache is used) the positions each already
/// has cached and its block table.
struct TokenBatch {
  std::vector<std::span<const int32_t>> tokens;        ///< per sequence: its new tokens (≥ 1)
  std::vector<int64_t> start;                          ///< per sequence: positions before them (empty: all 0)
  /// Per sequence, with a KV cache (else empty): its block table, every KV group's table
  /// in group order (equal lengths; KVCache's class comment, docs/architecture.md §8).
  std::vector<std::span<const int32_t>> block_tables;
};

/// The tokens of every sequence packed into rows: sequence i is rows [offset[i],
/// offset[i+1]); each row has its token id and its position.
struct PackedTokens {
  std::vector<int64_t> offset;  ///< sequences + 1 entries, offset[0] = 0
  std::vector<int64_t> start;   ///< per sequence: positions cached before its rows
  Tensor ids;                   ///< [T] i32 (on the model's device)
  Tensor positions;             ///< [T] i32: start[i] + t for the t-th new token of sequence i
  /// Context parallelism (docs/architecture.md §7 "Context parallelism"): the zigzag split
  /// these rows are one CP rank's part of; then sequence i's rows are that rank's rows of
  /// the whole sequence, `positions` their positions in it (not start[i] + t), and
  /// attention runs as ring attention over the CP group. Null: each sequence whole.
  std::shared_ptr<const ContextShard> context;
  int64_t rows() const { return offset.back(); }
  size_t sequences() const { return offset.size() - 1; }
  /// Rows of sequence i of a [T, ·] view.
  TensorView rows_of(const TensorView& t, size_t i) const { return t.rows(offset[i], offset[i + 1]); }
};

/// Packs `batch` (start empty means 0 for every sequence). ids and positions are built
/// and checked on the host, then copied to `device` (ops::copy) where the model's ops
/// read them; offset and start stay on the host. Throws InputError for an empty
/// sequence, an id outside [0, config.vocab_size) (naming the id, its position and
/// sequence), a negative start, or a position reaching max_position_embeddings.
PackedTokens pack_tokens(const TokenBatch& batch, const ModelConfig& config, Device device = Device::CPU);

}  // namespace olmo2
