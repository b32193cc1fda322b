// Memory sizes given on the command line ("512MiB", "2GiB").
#pragma once

#include <cstdint>
#include <string>

namespace olmo2 {

/// Parses a memory size: a number of bytes with an optional unit K, M, G (powers of
/// 1000), KiB, MiB, GiB (powers of 1024), e.g. "512MiB", "2GiB", "1.5G". Throws
/// InputError naming `what` and the text for anything else or a size ≤ 0.
int64_t parse_memory_size(const std::string& text, const std::string& what);

}  // namespace olmo2
