// Response ids of the OpenAI-compatible API (docs/architecture.md §8, API).
#pragma once

#include <string>
#include <string_view>

namespace olmo2 {

/// `prefix` ("cmpl-", "chatcmpl-") + 32 lowercase hex digits: 128 bits from a per-thread
/// std::mt19937_64 seeded from std::random_device, so ids are unique per request across
/// threads and restarts (not a counter, which repeats after a restart, and not secret).
std::string make_response_id(std::string_view prefix);

}  // namespace olmo2
