// The CUDA implementations of every op of the table (ops/op_list.h), declared from it,
// with the CPU ones' contracts (ops/cpu/kernels.h, and each op's header). The
// dispatcher (ops/dispatch.cpp) calls them for views on Device::CUDA. Kernels are
// enqueued on the compute stream (ops/cuda/runtime.h) and return before they finish;
// the ops that return a host value (sum_squares, sum_row_norms,
// causal_attention_max_logit, the cross-entropy sums) and copies to host memory wait
// for the stream. Every CUDA/cuBLAS failure throws Error naming the call
// (ops/cuda/check.h). Only in builds with CUDA (OLMO2_HAVE_CUDA).
#pragma once

#include "ops/op_list.h"

namespace olmo2::ops::cuda {

OLMO2_OP_TABLE(OLMO2_DECLARE_OP)

}  // namespace olmo2::ops::cuda
