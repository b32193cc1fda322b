// Topology: world rank <-> (tp, dp, pp) coordinates and the process groups they form.
// Pure arithmetic: no MPI, no I/O. The one place that knows the rank order (docs/architecture.md §4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace olmo2::parallel {

/// Sizes of the three parallel axes; world = tp × pp × dp.
struct Layout {
  int tp = 1;  ///< tensor-parallel ranks (heads, MLP columns, vocab rows are split over them)
  int pp = 1;  ///< pipeline stages (layers are split over them)
  int dp = 1;  ///< data-parallel replicas (the batch is split over them)
  bool operator==(const Layout&) const = default;
};

/// One rank's index on each axis: 0 ≤ tp < Layout::tp, 0 ≤ dp < Layout::dp,
/// 0 ≤ pp < Layout::pp.
struct Coords {
  int tp = 0;
  int dp = 0;
  int pp = 0;
  bool operator==(const Coords&) const = default;
};

/// "tp 2 × pp 2 × dp 1", for messages.
std::string to_string(const Layout& layout);
/// "(tp 1, dp 0, pp 1)", for messages.
std::string to_string(const Coords& coords);

/// The rank layout of one job. TP varies fastest, then DP, then PP (Megatron-LM's default
/// order): rank = tp_idx + tp × (dp_idx + dp × pp_idx). So a TP group is `tp` consecutive
/// ranks (inside one node when the node has enough GPUs), a DP group is strided by `tp`,
/// a PP group by `tp × dp`. Immutable and cheap to copy.
///
/// Every group of one axis has a "color", an id in [0, world / group size) that is equal
/// for the members of one group and different between groups: pass it with key = world
/// rank to MPI_Comm_split and the new communicator's rank is the rank's index on that
/// axis (members are sorted by world rank and their axis index grows with it).
class Topology {
 public:
  /// One process: world 1, tp = pp = dp = 1.
  Topology() = default;

  /// The layout of a `world`-rank job. `dp` = 0 derives dp = world / (tp × pp).
  /// `max_dp` > 0 caps the data-parallel replicas (a command that runs one job per
  /// replica, e.g. serve: 1); 0 leaves dp free. The one check of a job's layout
  /// arithmetic (docs/architecture.md §4): throws InputError, one message per mistake
  /// naming every number, when world, tp or pp < 1, dp or max_dp < 0, world is not
  /// divisible by tp × pp (dp derived; with max_dp 1 the message says the command takes no dp), world ≠ tp × pp × dp, or dp > max_dp.
  static Topology make(int world, int tp, int pp, int dp = 0, int max_dp = 0);

  /// The layout `layout` on exactly tp × pp × dp ranks, for a plan made without a job
  /// (`olmo2 info`, tests). Throws InputError naming the axis when one is < 1
  /// ("invalid layout: tp must be at least 1, got 0"), and naming the product when it
  /// exceeds kMaxWorld ranks.
  static Topology make(const Layout& layout);

  /// More ranks than any real job (2^20): keeps tp × pp × dp, and a partition plan's one
  /// entry per rank, far from overflow.
  static constexpr int64_t kMaxWorld = int64_t{1} << 20;

  /// Number of ranks (tp × pp × dp).
  int world() const { return world_; }
  const Layout& layout() const { return layout_; }

  /// Coordinates of world rank `rank`. Throws ShapeError when rank ∉ [0, world).
  Coords coords(int rank) const;
  /// World rank at `c`. Throws ShapeError when a coordinate is outside its axis.
  int rank(const Coords& c) const;

  /// The sorted world ranks of `rank`'s TP group (same dp and pp; tp consecutive ranks).
  /// Throws ShapeError when rank ∉ [0, world); likewise for dp_group and pp_group.
  std::vector<int> tp_group(int rank) const;
  /// The sorted world ranks of `rank`'s DP group (same tp and pp; dp ranks, stride tp).
  std::vector<int> dp_group(int rank) const;
  /// The sorted world ranks of `rank`'s PP group (same tp and dp; pp ranks, stride tp × dp).
  std::vector<int> pp_group(int rank) const;

  /// Color of `rank`'s TP group: dp_idx + dp × pp_idx, in [0, dp × pp).
  int tp_color(int rank) const;
  /// Color of `rank`'s DP group: tp_idx + tp × pp_idx, in [0, tp × pp).
  int dp_color(int rank) const;
  /// Color of `rank`'s PP group: tp_idx + tp × dp_idx, in [0, tp × dp).
  int pp_color(int rank) const;

 private:
  Topology(int world, Layout layout) : world_(world), layout_(layout) {}
  void check_rank(int rank) const;

  int world_ = 1;
  Layout layout_;
};

}  // namespace olmo2::parallel
