// The OLMO2_CUDA_ON_CPU build's cuda_bf16.h (the bf16 type and conversions of
// ops/simt/device_intrinsics.h; docs/architecture.md §10).
#pragma once
#include "ops/simt/device_intrinsics.h"
