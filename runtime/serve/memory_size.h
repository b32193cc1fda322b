// Memory sizes given on the command line ("512MiB", "2GiB").
#pragma once

#include <cstdint>
#include <string>

namespace olmo2 {

/// Parses a memory size: a decimal number (digits, an optional fraction) of bytes with an
/// optional unit in any letter case — K, M, G, T or KB, MB, GB, TB (powers of 1000), KiB,
/// MiB, GiB, TiB (powers of 1024), B — e.g. "512MiB", "2GiB", "1.5GB", "80gb". Throws
/// InputError naming `what` and the text for anything else (a sign, an exponent,
/// hexadecimal, an unknown unit), a size below one byte or above 9e18 bytes.
int64_t parse_memory_size(const std::string& text, const std::string& what);

}  // namespace olmo2
