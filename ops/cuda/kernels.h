// The CUDA implementations of ops/ that exist so far, with the CPU ones' signatures
// (ops/cpu/kernels.h); the dispatcher (ops/dispatch.cpp) calls them for views on
// Device::CUDA. Only in builds with CUDA (OLMO2_HAVE_CUDA).
#pragma once

#include "ops/tensor.h"

namespace olmo2::ops::cuda {

/// ops::rmsnorm on Device::CUDA views. Throws Error on a CUDA failure (naming the call).
void rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& y);

}  // namespace olmo2::ops::cuda
