// Choosing this process's GPU, for the layers above ops/ (docs/architecture.md §2 the
// device seam, §4 rank layout): how many GPUs it sees, making one current and naming the
// process in CUDA errors, and what the GPU is. No CUDA types; every build has these, and
// without CUDA they report no GPU.
#pragma once

#include <string>

namespace olmo2::ops {

/// The number of GPUs this process sees (ops::cuda::device_count): 0, not an error, in a
/// build without CUDA, with no driver or no device, with the reason in `*why` when given.
int visible_gpu_count(std::string* why = nullptr);

/// Makes GPU `gpu` this process's device (ops::cuda::use_device) — call it before any
/// other CUDA work — and ends every later CUDA error message with `error_label` (e.g.
/// "rank 3 (tp 1, pp 0, dp 1) on GPU 1"). Throws InputError when `gpu` is not in [0,
/// visible_gpu_count()), Error in a build without CUDA.
void use_gpu(int gpu, const std::string& error_label);

/// "NVIDIA H200, 139 GiB": GPU `gpu`'s name and memory (cudaGetDeviceProperties; GiB
/// rounded, one decimal below 10). Throws Error on a CUDA failure or without CUDA.
std::string gpu_description(int gpu);

}  // namespace olmo2::ops
