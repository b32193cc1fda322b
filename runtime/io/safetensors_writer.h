// safetensors writer (the format read by runtime/io/safetensors.h).
#pragma once

#include <map>
#include <string>

#include "ops/tensor.h"

namespace olmo2 {

/// The bytes of a safetensors file before its data: the 8-byte little-endian header
/// length, then the JSON header (tensors in name order with their dtype, shape and
/// data offsets, `{"format": "pt"}` metadata as `transformers` writes it) padded with
/// spaces to a multiple of 8 bytes. Reads only the views' dtypes and shapes, so they may
/// lie on any device. Throws Error when a view is not contiguous.
std::string safetensors_header(const std::map<std::string, TensorView>& tensors);

/// Writes `tensors` (contiguous CPU views, any dtype) to `path` in the safetensors
/// layout, in name order, header padded with spaces to a multiple of 8 bytes, with
/// `{"format": "pt"}` metadata as `transformers` writes it. Throws Error when the file
/// cannot be written or a view is not contiguous.
void save_safetensors(const std::string& path, const std::map<std::string, TensorView>& tensors);

}  // namespace olmo2
