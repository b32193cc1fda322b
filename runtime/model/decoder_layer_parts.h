// Pieces of the decoder layer's forward that its recomputation (decoder_layer_recompute.cpp)
// must run exactly as the forward (decoder_layer.cpp) runs them: one definition each, so
// a recomputed activation is the forward's bit for bit (docs/architecture.md §7
// "Recomputation"). Internal to runtime/model/.
#pragma once

#include "runtime/model/decoder_layer.h"

namespace olmo2::layer_parts {

/// `t` as a [rows, cols] f32 tensor on `device`: reused when it has that shape and
/// device, else allocated (zeros).
TensorView sized(Tensor& t, int64_t rows, int64_t cols, Device device);

/// A new tensor holding a copy of `v`.
Tensor copy_of(const TensorView& v);

/// Rounds `t` in place to `act` (nothing for f32): where the reference materialises a
/// bf16 activation (docs/architecture.md §3.2).
void round_to_activation(const TensorView& t, DType act);

/// q, k [T, local heads·hd] from the projections q0, k0: the whole-projection QK-norm
/// (under TP one [T, 2] all-reduce, parallel::tp_qk_norm; q, k may be q0, k0 themselves),
/// rounded to `act`, then the RoPE of global layer `layer` at packed.positions, rounded
/// again. Source: Olmo2Attention.forward (transformers' modeling_olmo2.py).
void qk_norm_rope(const LayerContext& ctx, const LayerWeights& w, int64_t layer, const PackedTokens& packed,
                  DType act, const TensorView& q0, const TensorView& k0, const TensorView& q, const TensorView& k);

/// Causal attention of each sequence of `packed` over its own rows (no KV cache), within
/// global layer `layer`'s window, into out [T, local q heads·hd] (ops::causal_attention).
/// With ctx.cp (packed.context set, else Error) ring attention over the CP group instead
/// (ring_attention_forward; docs/architecture.md §7 "Context parallelism"), writing its
/// log-sum-exp [T, local q heads] f32 into `lse` (scratch when `lse` is empty).
void attend_own_rows(const LayerContext& ctx, int64_t layer, const PackedTokens& packed, DType act,
                     const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     const TensorView& lse = {});

/// out = rmsnorm(in) · gain, rounded to `act`: a post-attention or post-feedforward norm.
void post_norm(const TensorView& in, const Tensor& gain, float eps, DType act, const TensorView& out);

}  // namespace olmo2::layer_parts
