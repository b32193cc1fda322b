// The public face of the device runtime for the layers above ops/ (docs/architecture.md
// §2, the device seam): which GPUs there are, which one this process uses, and the
// stream work on a device is ordered on by default. No CUDA types: a Stream carries the
// cudaStream_t as an opaque handle. Every build has these; without CUDA they report no
// GPU.
#pragma once

#include <string>

#include "ops/device.h"

namespace olmo2::ops {

/// The stream ops and collectives on `device` are ordered on by default: on the CPU the
/// implicit one (Stream{}); on CUDA the process's compute stream (created on first use
/// on the current GPU, docs/architecture.md §2). Throws Error for Device::CUDA in a
/// build without CUDA, or when CUDA fails to create the stream.
Stream default_stream(Device device);

/// The number of GPUs this process sees: 0, not an error, in a build without CUDA, with
/// no driver or no device, with the reason in `*why` when given.
int gpu_count(std::string* why = nullptr);

/// The CUDA device ordinal this process uses (cudaGetDevice). Throws Error in a build
/// without CUDA or when CUDA fails.
int current_gpu();

/// Makes GPU `gpu` this process's device (ops::cuda::use_device) — call it before any
/// other CUDA work — and ends every later CUDA error message with `error_label` (e.g.
/// "rank 3 (tp 1, pp 0, dp 1) on GPU 1"). Throws InputError when `gpu` is not in [0,
/// gpu_count()), Error in a build without CUDA.
void use_gpu(int gpu, const std::string& error_label);

/// What identifies GPU `gpu` on its host whatever CUDA_VISIBLE_DEVICES does to its
/// ordinal: its PCI bus id ("0000:3B:00.0", cudaDeviceGetPCIBusId); "emulated" on the
/// emulated device. Two processes of one host use the same GPU exactly when these are
/// equal. Throws Error on a CUDA failure or without CUDA.
std::string gpu_identity(int gpu);

/// "NVIDIA H200, 139 GiB": GPU `gpu`'s name and memory (cudaGetDeviceProperties; GiB
/// rounded, one decimal below 10). Throws Error on a CUDA failure or without CUDA.
std::string gpu_description(int gpu);

}  // namespace olmo2::ops
