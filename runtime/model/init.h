// Deterministic OLMo 2 initialisation (docs/architecture.md §7 "Init"): truncated normal
// std 0.02 cut at ±3σ for every weight, embeddings and
// lm_head included, norm weights 1, no depth scaling. Each element's value is a pure
// function of (seed, parameter name, global element index), so every (tp, pp, dp)
// layout builds exactly the same model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/hash.h"
#include "runtime/model/parameters.h"

namespace olmo2 {

/// The initial value of element `g` (row-major index into the full, unsharded,
/// unpadded tensor) of a non-norm parameter named `name`, as a double before the
/// rounding to f32. The exact algorithm, to reproduce it elsewhere:
///   key = mix(seed XOR fnv1a64(name))                 (mix = splitmix64_mix)
///   s   = key XOR (g · 0xd1b54a32d192ed03)            (mod 2^64; distinct for each g)
///   r_k = mix(s + k · 0x9e3779b97f4a7c15), k = 1, 2, … (the outputs of a SplitMix64
///                                                      generator seeded with s)
///   attempt j = 0, 1, …: u1 = ((r_{2j+1} >> 11) + 1) · 2^-53  ∈ (0, 1]
///                        u2 = (r_{2j+2} >> 11) · 2^-53        ∈ [0, 1)
///                        z  = sqrt(−2 ln u1) · cos(2π u2)    (Box–Muller, double)
///   the first z with |z| ≤ 3 gives std · z (rejection = torch.nn.init.trunc_normal_'s
///   distribution with a = −3 std, b = 3 std); after 64 rejected attempts (probability
///   0.0027^64) the value is 0.
/// Throws nothing; `std` may be any finite value.
double init_value(uint64_t seed, const std::string& name, int64_t g, double std);

/// Fills out[0, n) with N(0, std²) values, each a function of (key, index) up to the
/// last bit (a block's tail may take scalar code where the rest takes vector code), fast:
/// a 32-bit counter hash gives each pair of elements (2p, 2p+1) two uniforms, and a
/// float Box–Muller with polynomial log, sin and cos (relative error < 1e-6) turns them
/// into r·cos θ and r·sin θ. Branch-free, so GCC vectorises it; OpenMP over blocks. For
/// benchmark and test models (Olmo2Model::random), not the training init (init_value).
void fill_normal(float* out, int64_t n, uint64_t key, float std);

/// True for parameters initialised to 1: names ending in "norm.weight" (q_norm, k_norm,
/// post_attention_layernorm, post_feedforward_layernorm, model.norm).
bool is_norm_weight(const std::string& name);

/// Fills `p.value` (f32, local shape, on any device: computed on the host, then
/// copied) with this rank's slice of the initial tensor:
/// 1 for norm weights; for others, local element i gets f32(init_value(seed, p.name,
/// p.global_index(i), std)), and 0 where global_index is −1 (vocab padding rows).
/// OpenMP over rows. Throws InputError when `std` is negative or not finite.
void init_parameter(const Parameter& p, uint64_t seed, double std = 0.02);

/// init_parameter for every parameter of `params`.
void init_parameters(std::vector<Parameter>& params, uint64_t seed, double std = 0.02);

}  // namespace olmo2
