// The precision policy (docs/architecture.md §3.2): what fp32 and bf16 mean for weights,
// products, statistics and activations, in training and serving alike.
#pragma once

#include <optional>
#include <string>

#include "ops/dtype.h"

namespace olmo2 {

/// fp32: weights and every computation in f32. bf16 (how OLMo 2 trains and is
/// released): weights held in bf16 — what is loaded is what is kept, no f32 copy —,
/// matrix products with bf16 inputs and f32 accumulation, RMSNorm, softmax, RoPE and
/// loss statistics in f32, and activations rounded to bf16 wherever transformers' bf16
/// model materialises them. Training in bf16 keeps f32 master weights, f32 AdamW
/// moments and f32 gradients (reduced over data-parallel ranks in f32) and casts the
/// master weights to bf16 for compute after every update (OLMo-core's FSDP mixed
/// precision: param_dtype bf16, reduce_dtype f32).
enum class Precision { FP32, BF16 };

/// "fp32" or "bf16".
const char* precision_name(Precision p);

/// Parses "fp32" / "bf16"; InputError naming `what` and the text for anything else.
Precision parse_precision(const std::string& text, const std::string& what);

/// The dtype weights are held in for compute: f32 or bf16.
inline DType weight_dtype(Precision p) { return p == Precision::BF16 ? DType::BF16 : DType::F32; }

/// The dtype activations are rounded to (LayerOptions::activations): f32 (no rounding)
/// or bf16.
inline DType activation_dtype_of(Precision p) { return p == Precision::BF16 ? DType::BF16 : DType::F32; }

/// The precision a checkpoint serves in by default: bf16 for a bf16 checkpoint, fp32
/// for f32 and f16 ones.
inline Precision default_precision(DType checkpoint_dtype) {
  return checkpoint_dtype == DType::BF16 ? Precision::BF16 : Precision::FP32;
}

/// Parses a --kv-cache-dtype value: "auto" (nullopt: the compute precision's, see
/// kv_cache_dtype), "bf16" or "f32". InputError naming `what`, the text and the choices
/// for anything else ("f16" included: the KV cache holds f32 or bf16).
std::optional<DType> parse_kv_cache_dtype(const std::string& text, const std::string& what);

/// The dtype of the KV-cache pools (docs/architecture.md §3.2): `choice`, or for auto
/// (nullopt) the compute precision's — bf16 pools under bf16, whose keys and values are
/// bf16-rounded already, so the pools change no bit; f32 pools under fp32.
inline DType kv_cache_dtype(std::optional<DType> choice, Precision p) {
  return choice.value_or(activation_dtype_of(p));
}

}  // namespace olmo2
