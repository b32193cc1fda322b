// Start-up of ZeRO stages 2 and 3 without the whole model's storage: tensors that hold
// their shape but no storage, and one parameter read from a checkpoint, so that the
// trainer can build, initialise or load the model one unit at a time
// (docs/architecture.md §7 "ZeRO stages").
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/io/safetensors.h"
#include "runtime/model/parameters.h"

namespace olmo2 {

/// A tensor of `shape`, `dtype` and `device` without storage (a null view: empty() is
/// true, shape(), dtype() and device() are kept) — what a ZeRO stage leaves in place of
/// a tensor it does not hold whole. Throws nothing.
Tensor shape_only(const std::vector<int64_t>& shape, DType dtype, Device device);

/// The structure and shapes of zero_weights(config, shard, device), every tensor in
/// `dtype` (f32 or bf16) and shape_only: ZeRO-3's model and master weights, ZeRO-2 and 3's
/// gradients, before a unit's tensors are allocated. The shapes come from zero_weights
/// of one unit (the embedding, one layer, the final norm and lm_head) at a time, so at
/// most one unit's zeros exist at once, and none on return.
ModelWeights shape_only_weights(const ModelConfig& config, const ShardSpec& shard, DType dtype, Device device);

/// Writes `p.value` (f32, its local shape, with storage, on any device) from tensor
/// `p.name` of `checkpoint` as Olmo2Model::load reads it: this rank's rows or columns
/// [shard_begin, shard_end) of dimension shard_dim (the whole tensor when unsharded),
/// only the slice's bytes, converted to f32 from F32, BF16 or F16; vocab padding rows
/// past the table's end are 0; the tensor's pages of the mapping are dropped after.
/// Throws InputError as Checkpoint::load_slice does (missing tensor, wrong shape or dtype).
void load_parameter(const Checkpoint& checkpoint, const Parameter& p);

}  // namespace olmo2
