// Element-wise ops of the OLMo 2 block: SwiGLU activation and residual add.
#pragma once

#include "ops/tensor.h"

namespace olmo2::ops {

/// out = silu(gate) · up, silu(x) = x / (1 + e^(−x)); gate, up, out [T, I] f32 CPU,
/// out may alias gate or up. With act = bf16, silu(gate) and the product are each
/// rounded to bf16 as the reference (`act_fn(gate_proj(x)) * up_proj(x)`) rounds them.
/// Source: `Olmo2MLP` in transformers' modeling_olmo2.py.
void swiglu(const TensorView& gate, const TensorView& up, const TensorView& out,
            DType act = DType::F32);

/// y += x (same shape, f32 CPU); with act = bf16 the sum is rounded to bf16.
void add_inplace(const TensorView& y, const TensorView& x, DType act = DType::F32);

}  // namespace olmo2::ops
