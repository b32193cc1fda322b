#include "parallel/topology.h"

#include <cstdint>
#include <utility>

#include "core/error.h"

namespace olmo2::parallel {

std::string to_string(const Layout& l) {
  return detail::concat("tp ", l.tp, " × pp ", l.pp, " × dp ", l.dp);
}

std::string to_string(const Coords& c) {
  return detail::concat("(tp ", c.tp, ", dp ", c.dp, ", pp ", c.pp, ")");
}

Topology Topology::make(int world, int tp, int pp, int dp, int max_dp) {
  if (world < 1 || tp < 1 || pp < 1 || dp < 0) {
    OLMO2_THROW(InputError, "invalid layout: world ", world, ", tp ", tp, ", pp ", pp, ", dp ", dp,
                ": world, tp and pp must be ≥ 1 and dp ≥ 0 (0 = world / (tp × pp))");
  }
  if (max_dp < 0) OLMO2_THROW(InputError, "invalid layout: max_dp ", max_dp, " must be ≥ 0 (0 = any dp)");
  // 64-bit products: absurd factors must be refused, not overflow into a match.
  const int64_t tp_pp = int64_t{tp} * pp;
  if (dp == 0) {
    if (max_dp == 1 && world % tp_pp != 0) {  // a command without data parallelism: say so, not "dp derived"
      OLMO2_THROW(InputError, "invalid layout: world ", world, " ≠ tp ", tp, " × pp ", pp, " = ", tp_pp,
                  ": this command takes no data parallelism (dp 1), so start it on ", tp_pp,
                  tp_pp == 1 ? " rank" : " ranks");
    }
    if (world % tp_pp != 0) {
      OLMO2_THROW(InputError, "invalid layout: world ", world, " is not divisible by tp ", tp,
                  " × pp ", pp, " = ", tp_pp, " (dp derived as world / (tp × pp))");
    }
    dp = static_cast<int>(world / tp_pp);
  } else if (tp_pp * dp != world) {
    OLMO2_THROW(InputError, "invalid layout: tp ", tp, " × pp ", pp, " × dp ", dp, " = ",
                tp_pp * dp, " ≠ world ", world);
  }
  if (max_dp > 0 && dp > max_dp) {
    const int64_t ranks = tp_pp * max_dp;
    OLMO2_THROW(InputError, "invalid layout: tp ", tp, " × pp ", pp, " × dp ", dp, " = world ", world,
                ", but this command takes at most dp ", max_dp, ": start it on tp × pp × ", max_dp, " = ", ranks,
                ranks == 1 ? " rank" : " ranks");
  }
  return Topology(world, Layout{tp, pp, dp});
}

Topology Topology::make(const Layout& l) {
  const std::pair<const char*, int> axes[] = {{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}};
  for (const auto& [name, v] : axes) {
    if (v < 1) OLMO2_THROW(InputError, "invalid layout: ", name, " must be at least 1, got ", v);
  }
  // tp × pp < 2^62 in 64 bits; times dp only once that is at most kMaxWorld.
  const int64_t tp_pp = int64_t{l.tp} * l.pp;
  const int64_t world = tp_pp > kMaxWorld ? tp_pp : tp_pp * l.dp;
  if (world > kMaxWorld) {
    OLMO2_THROW(InputError, "invalid layout: tp ", l.tp, " x pp ", l.pp, " x dp ", l.dp,
                tp_pp > kMaxWorld ? std::string() : detail::concat(" = ", world), " ranks exceeds ", kMaxWorld);
  }
  return Topology(static_cast<int>(world), l);
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
