#include "parallel/topology.h"

#include <cstdint>
#include <utility>

#include "core/error.h"

namespace olmo2::parallel {

std::string to_string(const Layout& l) {
  return detail::concat("tp ", l.tp, " × pp ", l.pp, " × dp ", l.dp, l.cp > 1 ? detail::concat(" × cp ", l.cp) : "");
}

std::string to_string(const Coords& c) {
  return detail::concat("(tp ", c.tp, ", dp ", c.dp, ", pp ", c.pp, c.cp > 0 ? detail::concat(", cp ", c.cp) : "",
                        ")");
}

namespace {
/// "tp 2 × pp 1", with " × cp 2" when cp > 1: the axes that fix dp = world / their product.
std::string fixed_axes(int tp, int pp, int cp) {
  return detail::concat("tp ", tp, " × pp ", pp, cp > 1 ? detail::concat(" × cp ", cp) : "");
}
}  // namespace

Topology Topology::make(int world, int tp, int pp, int dp, int max_dp, int cp) {
  if (world < 1 || tp < 1 || pp < 1 || dp < 0 || cp < 1) {
    OLMO2_THROW(InputError, "invalid layout: world ", world, ", tp ", tp, ", pp ", pp, ", dp ", dp,
                cp != 1 ? detail::concat(", cp ", cp) : "",
                ": world, tp, pp and cp must be ≥ 1 and dp ≥ 0 (0 = world / (tp × pp × cp))");
  }
  if (max_dp < 0) OLMO2_THROW(InputError, "invalid layout: max_dp ", max_dp, " must be ≥ 0 (0 = any dp)");
  // 64-bit products: absurd factors must be refused, not overflow into a match.
  const int64_t fixed = int64_t{tp} * pp * cp;
  const std::string axes = fixed_axes(tp, pp, cp);
  if (dp == 0) {
    if (max_dp == 1 && world % fixed != 0) {  // a command without data parallelism: say so, not "dp derived"
      OLMO2_THROW(InputError, "invalid layout: world ", world, " ≠ ", axes, " = ", fixed,
                  ": this command takes no data parallelism (dp 1), so start it on ", fixed,
                  fixed == 1 ? " rank" : " ranks");
    }
    if (world % fixed != 0) {
      OLMO2_THROW(InputError, "invalid layout: world ", world, " is not divisible by ", axes, " = ", fixed,
                  cp > 1 ? " (dp derived as world / (tp × pp × cp))" : " (dp derived as world / (tp × pp))");
    }
    dp = static_cast<int>(world / fixed);
  } else if (fixed * dp != world) {
    OLMO2_THROW(InputError, "invalid layout: ", axes, " × dp ", dp, " = ", fixed * dp, " ≠ world ", world);
  }
  if (max_dp > 0 && dp > max_dp) {
    const int64_t ranks = fixed * max_dp;
    OLMO2_THROW(InputError, "invalid layout: ", axes, " × dp ", dp, " = world ", world,
                ", but this command takes at most dp ", max_dp, ": start it on ",
                cp > 1 ? "tp × pp × cp × " : "tp × pp × ", max_dp, " = ", ranks, ranks == 1 ? " rank" : " ranks");
  }
  return Topology(world, Layout{tp, pp, dp, cp});
}

Topology Topology::make(const Layout& l) {
  const std::pair<const char*, int> axes[] = {{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"cp", l.cp}};
  for (const auto& [name, v] : axes) {
    if (v < 1) OLMO2_THROW(InputError, "invalid layout: ", name, " must be at least 1, got ", v);
  }
  // Each product stays below 2^62 in 64 bits: one more factor only while it is at most kMaxWorld.
  int64_t world = 1;
  bool over = false;
  for (const auto& [name, v] : axes) {
    if (world <= kMaxWorld) {
      world *= v;
    } else if (v != 1) {
      over = true;  // the whole product is not computed: the message leaves it out
    }
  }
  if (world > kMaxWorld) {
    OLMO2_THROW(InputError, "invalid layout: tp ", l.tp, " x pp ", l.pp, " x dp ", l.dp,
                l.cp > 1 ? detail::concat(" x cp ", l.cp) : "", over ? std::string() : detail::concat(" = ", world),
                " ranks exceeds ", kMaxWorld);
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
  const int tp = layout_.tp, cp = layout_.cp, dp = layout_.dp;
  return Coords{rank % tp, (rank / (tp * cp)) % dp, rank / (tp * cp * dp), (rank / tp) % cp};
}

int Topology::rank(const Coords& c) const {
  const Layout& l = layout_;
  if (c.tp < 0 || c.tp >= l.tp || c.dp < 0 || c.dp >= l.dp || c.pp < 0 || c.pp >= l.pp || c.cp < 0 ||
      c.cp >= l.cp) {
    OLMO2_THROW(ShapeError, "coordinates ", to_string(c), " out of range for layout ",
                to_string(l));
  }
  return c.tp + l.tp * (c.cp + l.cp * (c.dp + l.dp * c.pp));
}

std::vector<int> Topology::group(int rank, int Coords::*axis, int size) const {
  Coords c = coords(rank);
  std::vector<int> g;
  g.reserve(size);
  for (c.*axis = 0; c.*axis < size; ++(c.*axis)) g.push_back(this->rank(c));
  return g;
}

std::vector<int> Topology::tp_group(int rank) const { return group(rank, &Coords::tp, layout_.tp); }
std::vector<int> Topology::cp_group(int rank) const { return group(rank, &Coords::cp, layout_.cp); }
std::vector<int> Topology::dp_group(int rank) const { return group(rank, &Coords::dp, layout_.dp); }
std::vector<int> Topology::pp_group(int rank) const { return group(rank, &Coords::pp, layout_.pp); }

int Topology::tp_color(int rank) const {
  const Coords c = coords(rank);
  return c.cp + layout_.cp * (c.dp + layout_.dp * c.pp);
}

int Topology::cp_color(int rank) const {
  const Coords c = coords(rank);
  return c.tp + layout_.tp * (c.dp + layout_.dp * c.pp);
}

int Topology::dp_color(int rank) const {
  const Coords c = coords(rank);
  return c.tp + layout_.tp * (c.cp + layout_.cp * c.pp);
}

int Topology::pp_color(int rank) const {
  const Coords c = coords(rank);
  return c.tp + layout_.tp * (c.cp + layout_.cp * c.dp);
}


}  // namespace olmo2::parallel
