#include "parallel/topology.h"

#include <cstdint>

#include "core/error.h"

namespace olmo2::parallel {

std::string to_string(const Layout& l) {
  return detail::concat("tp ", l.tp, " × pp ", l.pp, " × dp ", l.dp);
}

std::string to_string(const Coords& c) {
  return detail::concat("(tp ", c.tp, ", dp ", c.dp, ", pp ", c.pp, ")");
}

Topology Topology::make(int world, int tp, int pp, int dp) {
  if (world < 1 || tp < 1 || pp < 1 || dp < 0) {
    OLMO2_THROW(InputError, "invalid layout: world ", world, ", tp ", tp, ", pp ", pp, ", dp ", dp,
                ": world, tp and pp must be ≥ 1 and dp ≥ 0 (0 = world / (tp × pp))");
  }
  // 64-bit products: absurd factors must be refused, not overflow into a match.
  const int64_t tp_pp = int64_t{tp} * pp;
  if (dp == 0) {
    if (world % tp_pp != 0) {
      OLMO2_THROW(InputError, "invalid layout: world ", world, " is not divisible by tp ", tp,
                  " × pp ", pp, " = ", tp_pp, " (dp derived as world / (tp × pp))");
    }
    dp = static_cast<int>(world / tp_pp);
  } else if (tp_pp * dp != world) {
    OLMO2_THROW(InputError, "invalid layout: tp ", tp, " × pp ", pp, " × dp ", dp, " = ",
                tp_pp * dp, " ≠ world ", world);
  }
  return Topology(world, Layout{tp, pp, dp});
}

void Topology::check_rank(int rank) const {
  if (rank < 0 || rank >= world_) {
    OLMO2_THROW(ShapeError, "rank ", rank, " out of range [0, ", world_, ") for layout ",
                to_string(layout_));
  }
}

Coords Topology::coords(int rank) const {
  check_rank(rank);
  const int tp = layout_.tp, dp = layout_.dp;
  return Coords{rank % tp, (rank / tp) % dp, rank / (tp * dp)};
}

int Topology::rank(const Coords& c) const {
  const Layout& l = layout_;
  if (c.tp < 0 || c.tp >= l.tp || c.dp < 0 || c.dp >= l.dp || c.pp < 0 || c.pp >= l.pp) {
    OLMO2_THROW(ShapeError, "coordinates ", to_string(c), " out of range for layout ",
                to_string(l));
  }
  return c.tp + l.tp * (c.dp + l.dp * c.pp);
}

std::vector<int> Topology::tp_group(int rank) const {
  Coords c = coords(rank);
  std::vector<int> g;
  g.reserve(layout_.tp);
  for (c.tp = 0; c.tp < layout_.tp; ++c.tp) g.push_back(this->rank(c));
  return g;
}

std::vector<int> Topology::dp_group(int rank) const {
  Coords c = coords(rank);
  std::vector<int> g;
  g.reserve(layout_.dp);
  for (c.dp = 0; c.dp < layout_.dp; ++c.dp) g.push_back(this->rank(c));
  return g;
}

std::vector<int> Topology::pp_group(int rank) const {
  Coords c = coords(rank);
  std::vector<int> g;
  g.reserve(layout_.pp);
  for (c.pp = 0; c.pp < layout_.pp; ++c.pp) g.push_back(this->rank(c));
  return g;
}

int Topology::tp_color(int rank) const {
  const Coords c = coords(rank);
  return c.dp + layout_.dp * c.pp;
}

int Topology::dp_color(int rank) const {
  const Coords c = coords(rank);
  return c.tp + layout_.tp * c.pp;
}

int Topology::pp_color(int rank) const {
  const Coords c = coords(rank);
  return c.tp + layout_.tp * c.dp;
}

}  // namespace olmo2::parallel
