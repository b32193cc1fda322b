// How a read is compared with transformers' hooks (docs/architecture.md §10, §13).
#pragma once

#include <algorithm>

namespace olmo2::test {

/// The factor a read's difference from the reference is divided by before it is held to
/// 1e-4: 1, or max|reference| / 50 for tensors whose entries reach beyond 50 (the deeper
/// layers' mlp_neurons reach ~100, where f32 sums in another order than PyTorch's differ
/// by a few ulps, ~1e-6 relative, already ~1e-4 absolute).
inline double tolerance_scale(double max_abs_reference) { return std::max(1.0, max_abs_reference / 50.0); }

}  // namespace olmo2::test
