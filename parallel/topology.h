// Topology: world rank <-> (tp, cp, dp, pp) coordinates and the process groups they form.
// Pure arithmetic: no MPI, no I/O. The one place that knows the rank order (docs/architecture.md §4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace olmo2::parallel {

/// Sizes of the four parallel axes; world = tp × cp × dp × pp.
struct Layout {
  int tp = 1;  ///< tensor-parallel ranks (heads, MLP columns, vocab rows are split over them)
  int pp = 1;  ///< pipeline stages (layers are split over them)
  int dp = 1;  ///< data-parallel replicas (the batch is split over them)
  int cp = 1;  ///< context-parallel ranks (each sequence's tokens are split over them)
  bool operator==(const Layout&) const = default;
};

/// One rank's index on each axis: 0 ≤ tp < Layout::tp, 0 ≤ dp < Layout::dp,
/// 0 ≤ pp < Layout::pp, 0 ≤ cp < Layout::cp.
struct Coords {
  int tp = 0;
  int dp = 0;
  int pp = 0;
  int cp = 0;
  bool operator==(const Coords&) const = default;
};

/// "tp 2 × pp 2 × dp 1" (and " × cp 2" when cp > 1), for messages.
std::string to_string(const Layout& layout);
/// "(tp 1, dp 0, pp 1)" (and ", cp 1" inside when the rank has a cp index > 0), for messages.
std::string to_string(const Coords& coords);

/// The rank layout of one job. TP varies fastest, then CP, then DP, then PP (Megatron-LM's
/// tp-cp-dp-pp order): rank = tp_idx + tp × (cp_idx + cp × (dp_idx + dp × pp_idx)). So a TP
/// group is `tp` consecutive ranks (inside one node when the node has enough GPUs), a CP
/// group is strided by `tp`, a DP group by `tp × cp`, a PP group by `tp × cp × dp`. With
/// cp 1 every rank number is the (tp, dp, pp) layout's (docs/architecture.md §4).
/// Immutable and cheap to copy.
///
/// Every group of one axis has a "color", an id in [0, world / group size) that is equal
/// for the members of one group and different between groups: pass it with key = world
/// rank to MPI_Comm_split and the new communicator's rank is the rank's index on that
/// axis (members are sorted by world rank and their axis index grows with it).
class Topology {
 public:
  /// One process: world 1, tp = pp = dp = cp = 1.
  Topology() = default;

  /// The layout of a `world`-rank job. `dp` = 0 derives dp = world / (tp × pp × cp).
  /// `max_dp` > 0 caps the data-parallel replicas (a command that runs one job per
  /// replica, e.g. serve: 1); 0 leaves dp free. The one check of a job's layout
  /// arithmetic (docs/architecture.md §4): throws InputError, one message per mistake
  /// naming every number, when world, tp or pp < 1, dp or max_dp < 0, world is not
  /// divisible by tp × pp (dp derived; with max_dp 1 the message says the command takes no dp), world ≠ tp × pp × dp, or dp > max_dp.
  /// `cp` (≥ 1, InputError otherwise) is the context-parallel axis: dp is then derived as
  /// world / (tp × pp × cp) and every message names cp beside tp and pp.
  static Topology make(int world, int tp, int pp, int dp = 0, int max_dp = 0, int cp = 1);

  /// The layout `layout` on exactly tp × pp × dp × cp ranks, for a plan made without a job
  /// (`olmo2 info`, tests). Throws InputError naming the axis when one is < 1
  /// ("invalid layout: tp must be at least 1, got 0"), and naming the product when it
  /// exceeds kMaxWorld ranks.
  static Topology make(const Layout& layout);

  /// More ranks than any real job (2^20): keeps tp × pp × dp, and a partition plan's one
  /// entry per rank, far from overflow.
  static constexpr int64_t kMaxWorld = int64_t{1} << 20;

  /// Number of ranks (tp × cp × dp × pp).
  int world() const { return world_; }
  const Layout& layout() const { return layout_; }

  /// Coordinates of world rank `rank`. Throws ShapeError when rank ∉ [0, world).
  Coords coords(int rank) const;
  /// World rank at `c`. Throws ShapeError when a coordinate is outside its axis.
  int rank(const Coords& c) const;

  /// The sorted world ranks of `rank`'s TP group (same cp, dp and pp; tp consecutive ranks).
  /// Throws ShapeError when rank ∉ [0, world); likewise for the other groups.
  std::vector<int> tp_group(int rank) const;
  /// The sorted world ranks of `rank`'s CP group (same tp, dp and pp; cp ranks, stride tp).
  std::vector<int> cp_group(int rank) const;
  /// The sorted world ranks of `rank`'s DP group (same tp, cp and pp; dp ranks, stride tp × cp).
  std::vector<int> dp_group(int rank) const;
  /// The sorted world ranks of `rank`'s PP group (same tp, cp and dp; pp ranks, stride tp × cp × dp).
  std::vector<int> pp_group(int rank) const;

  /// Color of `rank`'s TP group: cp_idx + cp × (dp_idx + dp × pp_idx), in [0, cp × dp × pp).
  int tp_color(int rank) const;
  /// Color of `rank`'s CP group: tp_idx + tp × (dp_idx + dp × pp_idx), in [0, tp × dp × pp).
  int cp_color(int rank) const;
  /// Color of `rank`'s DP group: tp_idx + tp × (cp_idx + cp × pp_idx), in [0, tp × cp × pp).
  int dp_color(int rank) const;
  /// Color of `rank`'s PP group: tp_idx + tp × (cp_idx + cp × dp_idx), in [0, tp × cp × dp).
  int pp_color(int rank) const;

 private:
  Topology(int world, Layout layout) : world_(world), layout_(layout) {}
  void check_rank(int rank) const;
  /// The sorted ranks whose coordinates differ from `rank`'s only on `axis` (of `size` ranks).
  std::vector<int> group(int rank, int Coords::*axis, int size) const;

  int world_ = 1;
  Layout layout_;
};

}  // namespace olmo2::parallel
