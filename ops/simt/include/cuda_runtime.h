// The OLMO2_CUDA_ON_CPU build's cuda_runtime.h: device code compiles as host C++ for the
// SIMT executor, runtime calls go to the stand-in (docs/architecture.md §10).
#pragma once
#include "ops/simt/cuda_runtime_stand_in.h"
#include "ops/simt/device_intrinsics.h"
