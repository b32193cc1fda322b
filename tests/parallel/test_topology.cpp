// Topology, exhaustively: every factorisation (tp, pp, dp) of every world size 1..16.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <climits>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "parallel/topology.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2::parallel {
namespace {

// Every layout with tp × pp × dp = world, for world = 1..16.
std::vector<Layout> all_layouts(int world) {
  std::vector<Layout> out;
  for (int tp = 1; tp <= world; ++tp) {
    for (int pp = 1; tp * pp <= world; ++pp) {
      if (world % (tp * pp) == 0) out.push_back(Layout{tp, pp, world / (tp * pp)});
    }
  }
  return out;
}

using test::message_of;

// Checks one axis's groups: size, sorted, contains the rank, members differ only on
// that axis and member i has index i there, colors equal exactly within a group, and
// the groups partition the world.
template <typename Group, typename Color, typename Index>
void check_axis(const Topology& t, const char* axis, int size, int stride, Group group, Color color,
                Index index) {
  SCOPED_TRACE(axis);
  const int world = t.world();
  std::vector<int> owner(world, -1);  // color of the group that holds each rank
  std::set<int> colors;
  for (int r = 0; r < world; ++r) {
    const std::vector<int> g = group(r);
    ASSERT_EQ(static_cast<int>(g.size()), size) << "rank " << r;
    EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
    EXPECT_NE(std::find(g.begin(), g.end(), r), g.end()) << "rank " << r << " not in its group";
    const int c = color(r);
    EXPECT_GE(c, 0);
    EXPECT_LT(c, world / size);
    colors.insert(c);
    Coords mine = t.coords(r);
    for (int i = 0; i < size; ++i) {
      EXPECT_EQ(g[i], g[0] + i * stride) << "rank " << r << " member " << i;
      Coords other = t.coords(g[i]);
      EXPECT_EQ(index(other), i) << "member " << i << " of rank " << r << "'s group";
      index(other) = index(mine);
      EXPECT_EQ(other, mine) << "member " << g[i] << " differs from rank " << r
                             << " on another axis";
      EXPECT_EQ(group(g[i]), g) << "rank " << g[i] << " sees another group than rank " << r;
      EXPECT_EQ(color(g[i]), c);
      if (owner[g[i]] == -1) owner[g[i]] = c;
      EXPECT_EQ(owner[g[i]], c) << "rank " << g[i] << " in two groups";
    }
  }
  EXPECT_EQ(static_cast<int>(colors.size()), world / size) << "one color per group";
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < world; ++s) {
      EXPECT_EQ(color(r) == color(s), group(r) == group(s)) << "ranks " << r << ", " << s;
    }
  }
}

TEST(Topology, EveryFactorisationOfWorld1To16) {
  int layouts = 0;
  for (int world = 1; world <= 16; ++world) {
    for (const Layout& l : all_layouts(world)) {
      SCOPED_TRACE("world " + std::to_string(world) + ", " + to_string(l));
      ++layouts;
      const Topology t = Topology::make(world, l.tp, l.pp, l.dp);
      EXPECT_EQ(t.world(), world);
      EXPECT_EQ(t.layout(), l);
      EXPECT_EQ(Topology::make(world, l.tp, l.pp, 0).layout(), l) << "dp derived";

      // rank <-> coords: the formula, in range, bijective.
      std::vector<int> hits(world, 0);
      for (int r = 0; r < world; ++r) {
        const Coords c = t.coords(r);
        EXPECT_TRUE(c.tp >= 0 && c.tp < l.tp && c.dp >= 0 && c.dp < l.dp && c.pp >= 0 &&
                    c.pp < l.pp)
            << to_string(c);
        EXPECT_EQ(r, c.tp + l.tp * (c.dp + l.dp * c.pp)) << to_string(c);
        EXPECT_EQ(t.rank(c), r);
      }
      for (int pp = 0; pp < l.pp; ++pp) {
        for (int dp = 0; dp < l.dp; ++dp) {
          for (int tp = 0; tp < l.tp; ++tp) {
            const int r = t.rank(Coords{tp, dp, pp});
            ASSERT_TRUE(r >= 0 && r < world);
            ++hits[r];
            EXPECT_EQ(t.coords(r), (Coords{tp, dp, pp}));
          }
        }
      }
      EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), world) << "every rank exactly once";

      // TP groups: consecutive ranks; DP: stride tp; PP: stride tp × dp.
      check_axis(
          t, "tp", l.tp, 1, [&](int r) { return t.tp_group(r); },
          [&](int r) { return t.tp_color(r); }, [](Coords& c) -> int& { return c.tp; });
      check_axis(
          t, "dp", l.dp, l.tp, [&](int r) { return t.dp_group(r); },
          [&](int r) { return t.dp_color(r); }, [](Coords& c) -> int& { return c.dp; });
      check_axis(
          t, "pp", l.pp, l.tp * l.dp, [&](int r) { return t.pp_group(r); },
          [&](int r) { return t.pp_color(r); }, [](Coords& c) -> int& { return c.pp; });
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(t.tp_group(r).front() % l.tp, 0) << "TP groups start at multiples of tp";
        EXPECT_EQ(t.tp_color(r), r / l.tp);
        // Two axes' groups of one rank meet only in that rank.
        for (const auto& [a, b] :
             {std::pair{t.tp_group(r), t.dp_group(r)}, std::pair{t.tp_group(r), t.pp_group(r)},
              std::pair{t.dp_group(r), t.pp_group(r)}}) {
          std::vector<int> both;
          std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
          EXPECT_EQ(both, std::vector<int>{r});
        }
      }
    }
  }
  EXPECT_EQ(layouts, 110) << "Σ over world 1..16 of the ordered factorisations into 3";
}

TEST(Topology, DefaultIsOneProcess) {
  const Topology t;
  EXPECT_EQ(t.world(), 1);
  EXPECT_EQ(t.layout(), (Layout{1, 1, 1}));
  EXPECT_EQ(t.coords(0), (Coords{0, 0, 0}));
  EXPECT_EQ(t.tp_group(0), std::vector<int>{0});
}

TEST(Topology, MakeAcceptsExactlyTheFactorisations) {
  for (int world = 1; world <= 16; ++world) {
    for (int tp = 1; tp <= world + 1; ++tp) {
      for (int pp = 1; pp <= world + 1; ++pp) {
        for (int dp = 1; dp <= world + 1; ++dp) {
          const bool ok = tp * pp * dp == world;
          try {
            Topology::make(world, tp, pp, dp);
            EXPECT_TRUE(ok) << world << " " << tp << " " << pp << " " << dp;
          } catch (const InputError&) {
            EXPECT_FALSE(ok) << world << " " << tp << " " << pp << " " << dp;
          }
        }
        const bool derivable = world % (tp * pp) == 0;
        try {
          Topology::make(world, tp, pp, 0);
          EXPECT_TRUE(derivable) << world << " " << tp << " " << pp;
        } catch (const InputError&) {
          EXPECT_FALSE(derivable) << world << " " << tp << " " << pp;
        }
      }
    }
  }
}

TEST(Topology, RefusalsNameTheNumbers) {
  EXPECT_EQ(message_of<InputError>([] { Topology::make(6, 2, 2, 2); }),
            "invalid layout: tp 2 × pp 2 × dp 2 = 8 ≠ world 6");
  EXPECT_EQ(message_of<InputError>([] { Topology::make(6, 4, 1, 0); }),
            "invalid layout: world 6 is not divisible by tp 4 × pp 1 = 4 "
            "(dp derived as world / (tp × pp))");
  for (auto [w, tp, pp, dp] : {std::array{4, 0, 1, 0}, std::array{4, 1, -2, 0},
                               std::array{4, 1, 1, -1}, std::array{0, 1, 1, 0}}) {
    const std::string m = message_of<InputError>([&] { Topology::make(w, tp, pp, dp); });
    EXPECT_NE(m.find("world " + std::to_string(w) + ", tp " + std::to_string(tp) + ", pp " +
                     std::to_string(pp) + ", dp " + std::to_string(dp)),
              std::string::npos)
        << m;
  }
  // Products beyond int are refused, not wrapped around into a match.
  EXPECT_NE(message_of<InputError>([] {
              Topology::make(16, 65536, 65536, 0);
            }).find("tp 65536 × pp 65536 = 4294967296"),
            std::string::npos);
  EXPECT_NE(message_of<InputError>([] {
              Topology::make(INT_MAX, INT_MAX, INT_MAX, INT_MAX);
            }).find("≠ world"),
            std::string::npos);
}

// max_dp: a command without data parallelism (serve) takes tp × pp ranks and no more,
// one message naming the numbers; the other refusals are unchanged by it.
TEST(Topology, MaxDpCapsTheReplicas) {
  EXPECT_EQ(Topology::make(4, 2, 2, 0, 1).layout(), (Layout{2, 2, 1}));
  EXPECT_EQ(Topology::make(4, 2, 2, 1, 1).layout(), (Layout{2, 2, 1}));
  EXPECT_EQ(Topology::make(8, 2, 2, 0, 2).layout(), (Layout{2, 2, 2}));
  EXPECT_EQ(message_of<InputError>([] { Topology::make(8, 2, 2, 0, 1); }),
            "invalid layout: tp 2 × pp 2 × dp 2 = world 8, but this command takes at most dp 1: "
            "start it on tp × pp × 1 = 4 ranks");
  EXPECT_EQ(message_of<InputError>([] { Topology::make(2, 1, 1, 0, 1); }),
            "invalid layout: tp 1 × pp 1 × dp 2 = world 2, but this command takes at most dp 1: "
            "start it on tp × pp × 1 = 1 rank");
  EXPECT_EQ(message_of<InputError>([] { Topology::make(2, 2, 2, 0, 1); }),
            "invalid layout: world 2 ≠ tp 2 × pp 2 = 4: this command takes no data parallelism (dp 1), so start it "
            "on 4 ranks");
  EXPECT_EQ(message_of<InputError>([] { Topology::make(2, 1, 1, 0, -1); }),
            "invalid layout: max_dp -1 must be ≥ 0 (0 = any dp)");
}

// A layout without a job (info's plan): exactly tp × pp × dp ranks.
TEST(Topology, MakeOfALayoutTakesItsOwnRanks) {
  const Topology t = Topology::make(Layout{2, 3, 2});
  EXPECT_EQ(t.world(), 12);
  EXPECT_EQ(t.layout(), (Layout{2, 3, 2}));
  EXPECT_EQ(t.coords(11), (Coords{1, 1, 2}));
  EXPECT_EQ(message_of<InputError>([] { Topology::make(Layout{0, 1, 1}); }),
            "invalid layout: tp must be at least 1, got 0");
  EXPECT_EQ(message_of<InputError>([] { Topology::make(Layout{1, 1, -1}); }),
            "invalid layout: dp must be at least 1, got -1");
  EXPECT_EQ(message_of<InputError>([] { Topology::make(Layout{1, 2, 1 << 20}); }),
            "invalid layout: tp 1 x pp 2 x dp 1048576 = 2097152 ranks exceeds 1048576");
  EXPECT_EQ(message_of<InputError>([] { Topology::make(Layout{INT_MAX, INT_MAX, INT_MAX}); }),
            "invalid layout: tp 2147483647 x pp 2147483647 x dp 2147483647 ranks exceeds 1048576");
}

TEST(Topology, OutOfRangeRanksAndCoords) {
  const Topology t = Topology::make(8, 2, 2, 0);
  EXPECT_EQ(message_of<ShapeError>([&] { t.coords(8); }),
            "rank 8 out of range [0, 8) for layout tp 2 × pp 2 × dp 2");
  EXPECT_NE(message_of<ShapeError>([&] { t.coords(-1); }).find("rank -1"), std::string::npos);
  EXPECT_EQ(message_of<ShapeError>([&] {
              t.rank(Coords{0, 2, 0});
            }),
            "coordinates (tp 0, dp 2, pp 0) out of range for layout tp 2 × pp 2 × dp 2");
  EXPECT_THROW(t.rank(Coords{-1, 0, 0}), ShapeError);
  EXPECT_THROW(t.rank(Coords{0, 0, 2}), ShapeError);
  EXPECT_THROW(t.tp_group(9), ShapeError);
  EXPECT_THROW(t.dp_group(-3), ShapeError);
  EXPECT_THROW(t.pp_group(8), ShapeError);
  EXPECT_THROW(t.tp_color(8), ShapeError);
  EXPECT_THROW(t.dp_color(8), ShapeError);
  EXPECT_THROW(t.pp_color(-1), ShapeError);
}

TEST(Topology, MegatronOrderExample) {
  // world 8 = tp 2 × dp 2 × pp 2: TP pairs {0,1},{2,3},...; DP {0,2}; PP {0,4}.
  const Topology t = Topology::make(8, 2, 2, 2);
  EXPECT_EQ(t.coords(5), (Coords{1, 0, 1}));
  EXPECT_EQ(t.tp_group(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(t.dp_group(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(t.pp_group(5), (std::vector<int>{1, 5}));
}

// Context parallelism (docs/architecture.md §4): every factorisation tp × cp × dp × pp of
// world 1..16 with cp > 1; rank = tp + tp·(cp + cp·(dp + dp·pp)); the four axes' groups
// each partition the world, with strides 1, tp, tp·cp and tp·cp·dp; any two groups of a
// rank meet only in it.
TEST(Topology, ContextParallelAxisEveryFactorisationOfWorld1To16) {
  int layouts = 0;
  for (int world = 1; world <= 16; ++world) {
    for (int cp = 2; cp <= world; ++cp) {
      if (world % cp != 0) continue;
      for (Layout l : all_layouts(world / cp)) {
        l.cp = cp;
        SCOPED_TRACE("world " + std::to_string(world) + ", " + to_string(l));
        ++layouts;
        const Topology t = Topology::make(world, l.tp, l.pp, l.dp, 0, cp);
        EXPECT_EQ(t.layout(), l);
        EXPECT_EQ(Topology::make(world, l.tp, l.pp, 0, 0, cp).layout(), l) << "dp derived";
        EXPECT_EQ(Topology::make(l).world(), world);
        for (int r = 0; r < world; ++r) {
          const Coords c = t.coords(r);
          EXPECT_TRUE(c.cp >= 0 && c.cp < cp) << to_string(c);
          EXPECT_EQ(r, c.tp + l.tp * (c.cp + cp * (c.dp + l.dp * c.pp))) << to_string(c);
          EXPECT_EQ(t.rank(c), r);
        }
        check_axis(
            t, "tp", l.tp, 1, [&](int r) { return t.tp_group(r); }, [&](int r) { return t.tp_color(r); },
            [](Coords& c) -> int& { return c.tp; });
        check_axis(
            t, "cp", cp, l.tp, [&](int r) { return t.cp_group(r); }, [&](int r) { return t.cp_color(r); },
            [](Coords& c) -> int& { return c.cp; });
        check_axis(
            t, "dp", l.dp, l.tp * cp, [&](int r) { return t.dp_group(r); }, [&](int r) { return t.dp_color(r); },
            [](Coords& c) -> int& { return c.dp; });
        check_axis(
            t, "pp", l.pp, l.tp * cp * l.dp, [&](int r) { return t.pp_group(r); },
            [&](int r) { return t.pp_color(r); }, [](Coords& c) -> int& { return c.pp; });
        for (int r = 0; r < world; ++r) {
          const std::vector<int> groups[] = {t.tp_group(r), t.cp_group(r), t.dp_group(r), t.pp_group(r)};
          for (size_t a = 0; a < 4; ++a) {
            for (size_t b = a + 1; b < 4; ++b) {
              std::vector<int> both;
              std::set_intersection(groups[a].begin(), groups[a].end(), groups[b].begin(), groups[b].end(),
                                    std::back_inserter(both));
              EXPECT_EQ(both, std::vector<int>{r}) << "axes " << a << " and " << b << " of rank " << r;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(layouts, 94) << "Σ over world 1..16 and cp > 1 dividing it of the factorisations of world / cp into 3";
}

TEST(Topology, ContextParallelMegatronOrderAndRefusals) {
  // world 8 = tp 2 × cp 2 × dp 2: TP {4,5}, CP {5,7} (stride tp), DP {1,5} (stride tp·cp).
  const Topology t = Topology::make(8, 2, 1, 2, 0, 2);
  EXPECT_EQ(t.coords(5), (Coords{1, 1, 0, 0}));
  EXPECT_EQ(t.tp_group(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(t.cp_group(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(t.dp_group(5), (std::vector<int>{1, 5}));
  EXPECT_EQ(to_string(t.layout()), "tp 2 × pp 1 × dp 2 × cp 2");
  // With cp 1 the rank numbers are the (tp, dp, pp) layout's.
  EXPECT_EQ(Topology::make(8, 2, 2, 2, 0, 1).coords(5), (Coords{1, 0, 1, 0}));
  EXPECT_NE(message_of<InputError>([] { Topology::make(6, 1, 1, 0, 0, 4); })
                .find("world 6 is not divisible by tp 1 × pp 1 × cp 4 = 4"),
            std::string::npos);
  EXPECT_NE(message_of<InputError>([] { Topology::make(8, 2, 1, 3, 0, 2); }).find("tp 2 × pp 1 × cp 2 × dp 3 = 12 ≠ world 8"),
            std::string::npos);
  EXPECT_NE(message_of<InputError>([] { Topology::make(4, 1, 1, 0, 0, 0); }).find("cp 0"), std::string::npos);
  EXPECT_NE(message_of<InputError>([] { Topology::make(Layout{1, 1, 1, 0}); }).find("cp must be at least 1, got 0"),
            std::string::npos);
}

}  // namespace
}  // namespace olmo2::parallel
