// What one batch-1 decode step must read and where its time goes (bench/README.md,
// "Against PyTorch", "The decode bound"): the bytes a step reads from memory — the
// weights as held plus the KV cache up to the step's position — which, over the
// machine's read bandwidth (bench/memory_bandwidth.h), bound decode from above; and the
// step's wall time split by the op profile (ops/op_profile.h) into products, attention,
// norms/RoPE/elementwise, other ops, sampling and the rest. Benchmark helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/op_profile.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/model.h"

namespace olmo2::bench {

/// Bytes of weights one decode step reads, as the model holds them (f32, bf16; a
/// quantized matrix its values + scales): every tensor but the input embedding, of which
/// one row is read (the whole table when lm_head is tied to it, since the logits read it).
double weight_bytes_per_token(const Olmo2Model& model);

/// Bytes of keys and values the attention of one token at position `position` (0-based;
/// it attends to positions 0 … position, a sliding layer to the last attention_window of
/// them) reads from `cache`, over the shard's layers, in the pools' dtype.
double kv_bytes_read(const Olmo2Model& model, const KVCache& cache, int64_t position);

/// Decode time by kind of work, seconds summed over the steps measured.
struct StepBreakdown {
  double products = 0;     ///< linear, linear_batch_invariant, linear_quantized (lm_head included)
  double attention = 0;    ///< causal_attention, paged_attention
  double elementwise = 0;  ///< rmsnorm*, rope, swiglu, add_inplace, copy, fill, round_to, scale, …
  double other_ops = 0;    ///< every other op (embedding, top_candidates, …)
  double sampling = 0;     ///< choosing the next token from the logits (the bench's argmax)
  double outside = 0;      ///< the step's wall time outside ops and sampling (host work between ops)
  double total = 0;        ///< the steps' wall time
  std::vector<ops::OpTime> ops;  ///< the profile behind the figures, largest first
};

/// Sorts a profile (ops::take_op_profile) into a StepBreakdown; `total` the steps' wall
/// time, `sampling` the time of which went to sampling.
StepBreakdown classify(std::vector<ops::OpTime> profile, double total, double sampling);

/// One line: each kind's share of the step, e.g. "products 81.2%, attention 6.1%, …",
/// then the three largest ops with their per-step milliseconds.
std::string describe(const StepBreakdown& b, int64_t steps);

}  // namespace olmo2::bench
