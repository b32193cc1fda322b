// The CPU implementations of every op of the table (ops/op_list.h), declared from it.
// Each has the contract of the public op of the same name (documented in the op's
// header: gemm.h, embedding.h, rmsnorm.h, rope.h, attention.h, paged_attention.h,
// elementwise.h, backward.h, tensor_ops.h, adamw.h, top_candidates.h) and is called by
// the dispatcher (ops/dispatch.cpp) for views on Device::CPU. Tests may call them
// directly to compare a backend against the CPU.
#pragma once

#include "ops/op_list.h"

namespace olmo2::ops::cpu {

OLMO2_OP_TABLE(OLMO2_DECLARE_OP)

}  // namespace olmo2::ops::cpu
