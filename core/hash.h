// Small, stable hash functions shared by every layer (names, host names, data files).
#pragma once

#include <cstdint>
#include <string_view>

namespace olmo2 {

/// FNV-1a 64-bit hash of the bytes of `s` (offset basis 0xcbf29ce484222325, prime
/// 0x100000001b3). Source: Fowler, Noll, Vo, "FNV hash" (IETF draft-eastlake-fnv).
inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

/// The SplitMix64 finaliser: z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27;
/// z *= 0x94d049bb133111eb; z ^= z >> 31 (all arithmetic mod 2^64). A bijection.
/// Source: Steele, Lea, Flood, "Fast splittable pseudorandom number generators"
/// (OOPSLA 2014).
inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace olmo2
