// Every dtype through every collective and message of MpiCommunicator with exact
// expected values, and the values fp32 used to get wrong: i64 sums past 2^24, 2^31 and
// 2^53, f64 sums that fp32 (hi, lo) pairs lose, bf16 sums rounded to nearest even, u8
// gathers, the 2^24 target count; CUDA views refused; host grouping by name
// (docs/architecture.md §6 (communicators), §10 (tests and fixtures)).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "parallel/mpi_communicator.h"
#include "parallel/node_ranks.h"
#include "parallel/process_groups.h"
#include "parallel/string_gather.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2::parallel {
namespace {

using test::message_of;
using test::world_rank;
using test::world_size;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Storage and exact conversions of each dtype (bf16 as its 16 bits).
template <DType D>
struct Traits;
template <>
struct Traits<DType::F32> {
  using T = float;
  static T from(double v) { return static_cast<T>(v); }
};
template <>
struct Traits<DType::F64> {
  using T = double;
  static T from(double v) { return v; }
};
template <>
struct Traits<DType::I32> {
  using T = int32_t;
  static T from(double v) { return static_cast<T>(v); }
};
template <>
struct Traits<DType::I64> {
  using T = int64_t;
  static T from(double v) { return static_cast<T>(v); }
};
template <>
struct Traits<DType::U8> {
  using T = uint8_t;
  static T from(double v) { return static_cast<T>(v); }
};
template <>
struct Traits<DType::BF16> {
  using T = uint16_t;
  static T from(double v) { return f32_to_bf16(static_cast<float>(v)); }
};

// Small positive integers: exact in every dtype, and their sums over 4 ranks too (≤ 52,
// below bf16's 256 and u8's 255), so any reduction order gives the same bits.
double small(int rank, size_t i) { return static_cast<double>((rank * 5 + i * 3) % 13 + 1); }

template <DType D>
void check_every_collective(Communicator& c, const std::vector<int>& members) {
  using T = typename Traits<D>::T;
  auto from = Traits<D>::from;
  const std::string where = std::string(dtype_name(D)) + " on group " + c.name();
  const int k = c.size(), me = c.rank();
  const size_t n = 7;
  auto view = [](std::vector<T>& v) {
    return TensorView(v.data(), D, {static_cast<int64_t>(v.size())});
  };

  // all_reduce, Sum and Max.
  std::vector<T> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = from(small(members[me], i));
  c.all_reduce(view(x), ReduceOp::Sum);
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (int m : members) s += small(m, i);
    EXPECT_EQ(x[i], from(s)) << "all_reduce_sum " << where << " at " << i;
  }
  for (size_t i = 0; i < n; ++i) x[i] = from(small(members[me], i));
  c.all_reduce(view(x), ReduceOp::Max);
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (int m : members) s = std::max(s, small(m, i));
    EXPECT_EQ(x[i], from(s)) << "all_reduce_max " << where << " at " << i;
  }

  // all_gather: rank-major.
  std::vector<T> in(n), out(n * k);
  for (size_t i = 0; i < n; ++i) in[i] = from(small(members[me], i));
  c.all_gather(view(in), view(out));
  for (size_t j = 0; j < out.size(); ++j) {
    EXPECT_EQ(out[j], from(small(members[j / n], j % n))) << "all_gather " << where << " at " << j;
  }

  // reduce_scatter, Sum and Max: this rank's slice of the reduced whole.
  std::vector<T> whole(n * k), part(n);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    for (size_t j = 0; j < whole.size(); ++j) whole[j] = from(small(members[me], j));
    c.reduce_scatter(view(whole), view(part), op);
    for (size_t i = 0; i < n; ++i) {
      double s = 0;
      for (int m : members) {
        const double v = small(m, static_cast<size_t>(me) * n + i);
        s = op == ReduceOp::Sum ? s + v : std::max(s, v);
      }
      EXPECT_EQ(part[i], from(s)) << "reduce_scatter_" << reduce_op_name(op) << " " << where
                                  << " at " << i;
    }
  }

  // broadcast from every root.
  for (int root = 0; root < k; ++root) {
    for (size_t i = 0; i < n; ++i) x[i] = me == root ? from(small(members[root], i)) : from(0);
    c.broadcast(view(x), root);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(x[i], from(small(members[root], i))) << "broadcast from " << root << " " << where;
    }
  }

  // send/recv around the ring (even ranks send first), then send_recv between pairs.
  if (k >= 2 && k % 2 == 0) {
    const int next = (me + 1) % k, prev = (me + k - 1) % k;
    std::vector<T> mine(n), got(n);
    for (size_t i = 0; i < n; ++i) mine[i] = from(small(members[me], i + 1));
    for (int phase = 0; phase < 2; ++phase) {
      if (me % 2 == phase) {
        c.send(view(mine), next, 5);
      } else {
        c.recv(view(got), prev, 5);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(got[i], from(small(members[prev], i + 1))) << "recv " << where;
    }
    const int partner = me ^ 1;
    std::vector<T> back(n);
    c.send_recv(view(mine), view(back), partner, 6, 6);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(back[i], from(small(members[partner], i + 1))) << "send_recv " << where;
    }
  }
}

void check_all_dtypes(Communicator& c, const std::vector<int>& members) {
  check_every_collective<DType::F32>(c, members);
  check_every_collective<DType::BF16>(c, members);
  check_every_collective<DType::F64>(c, members);
  check_every_collective<DType::I32>(c, members);
  check_every_collective<DType::I64>(c, members);
  check_every_collective<DType::U8>(c, members);
}

TEST(TypedCollectives, EveryDtypeThroughEveryCollectiveOnTheWorld) {
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 60.0);
  std::vector<int> members(n);
  for (int r = 0; r < n; ++r) members[r] = r;
  check_all_dtypes(*g.world, members);
}

TEST(TypedCollectives, EveryDtypeThroughEveryCollectiveOnPairs) {
  const int n = world_size();
  if (n % 2 != 0) GTEST_SKIP() << "needs an even world";
  ProcessGroups g = make_process_groups(Topology::make(n, 2, 1, 0), 60.0);
  const int base = world_rank() / 2 * 2;  // tp groups: consecutive world ranks
  check_all_dtypes(*g.tp, {base, base + 1});
}

TEST(TypedCollectives, I64SumsAreExactPastTwoToThe24_31And53) {
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 60.0);
  const int64_t r = world_rank();
  const int64_t p53 = int64_t{1} << 53;
  std::vector<int64_t> x = {p53 + r + 1, 3'000'000'000 + r, (int64_t{1} << 24) + 1, -(int64_t{1} << 40) * (r + 1)};
  g.world->all_reduce_sum(x);
  const int64_t k = n, tri = k * (k + 1) / 2;
  EXPECT_EQ(x[0], k * p53 + tri);
  EXPECT_EQ(x[1], k * 3'000'000'000 + tri - k);
  EXPECT_EQ(x[2], k * ((int64_t{1} << 24) + 1));
  EXPECT_EQ(x[3], -(int64_t{1} << 40) * tri);
  if (n >= 2) {
    EXPECT_NE(static_cast<int64_t>(static_cast<double>(k * p53 + tri)), x[0])
        << "the sum is not representable in f64: only an i64 reduction gets it";
  }
  std::vector<int32_t> y = {100'000'000 + static_cast<int32_t>(r), -7};
  g.world->all_reduce_sum(y);
  EXPECT_EQ(y[0], 100'000'000 * n + static_cast<int32_t>(tri - k));
  EXPECT_EQ(y[1], -7 * n);
  std::vector<int64_t> m = {p53 - r, -r};
  g.world->all_reduce_max(m);
  EXPECT_EQ(m[0], p53);
  EXPECT_EQ(m[1], 0);
}

// What the former fp32 (hi, lo) path returned for values[r] on rank r: the hi parts
// summed in fp32, the lo parts in fp32, in rank order.
double fp32_pair_sum(const std::vector<double>& values) {
  float hi = 0, lo = 0;
  for (double v : values) {
    const float h = static_cast<float>(v);
    hi += h;
    lo += static_cast<float>(v - static_cast<double>(h));
  }
  return static_cast<double>(hi) + static_cast<double>(lo);
}

TEST(TypedCollectives, F64SumsAreExactWhereFp32PairsWereNot) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 60.0);
  std::vector<double> per_rank(n, 0.0);
  // 2^25 + 1 + 2^-20 needs 46 significant bits: exact in f64, while the fp32 sum of the
  // hi parts, 2^25 + (1 + 2^-20), rounds to 2^25 (fp32 spacing there is 4).
  per_rank[0] = 33554432.0;
  per_rank[1] = 1.0 + std::ldexp(1.0, -20);
  std::vector<double> x = {per_rank[world_rank()], 0.1 * (world_rank() + 1)};
  g.world->all_reduce_sum(x);
  const double exact = 33554432.0 + 1.0 + std::ldexp(1.0, -20);
  EXPECT_EQ(x[0], exact);
  EXPECT_NE(fp32_pair_sum(per_rank), exact) << "the former path lost the 1";
  double tenths = 0;
  for (int r = 0; r < n; ++r) tenths += 0.1 * (r + 1);
  EXPECT_NEAR(x[1], tenths, 1e-15);
  std::vector<double> m = {-1.5 * (world_rank() + 1)};
  g.world->all_reduce_max(m);
  EXPECT_EQ(m[0], -1.5);
}

TEST(TypedCollectives, Bf16SumsRoundToNearestEven) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 60.0);
  // Rank 0 and rank 1 hold a and b, the others zeros: one rounding whatever the order.
  const std::vector<float> a = {1.0f, 1.0078125f, 256.0f, 3.0f, -2.0f};
  const std::vector<float> b = {0.00390625f, 0.00390625f, 1.0f, 0.5f, -0.0078125f};
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even 1. (1 + 2^-7) + 2^-8 is
  // halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up. 257 is halfway: to 256.
  const std::vector<float> want = {1.0f, 1.015625f, 256.0f, 3.5f, -2.0f};
  std::vector<uint16_t> x(a.size(), f32_to_bf16(0.0f));
  for (size_t i = 0; i < a.size(); ++i) {
    if (world_rank() == 0) x[i] = f32_to_bf16(a[i]);
    if (world_rank() == 1) x[i] = f32_to_bf16(b[i]);
  }
  g.world->all_reduce(TensorView(x.data(), DType::BF16, {static_cast<int64_t>(x.size())}), ReduceOp::Sum);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(bf16_to_f32(x[i]), want[i]) << i << ": " << a[i] << " + " << b[i];
  }
  EXPECT_NE(want[0], a[0] + b[0]) << "an f32 sum would keep 1.00390625";
  std::vector<uint16_t> m = {f32_to_bf16(-1.0f - world_rank()), f32_to_bf16(0.25f * world_rank())};
  g.world->all_reduce(TensorView(m.data(), DType::BF16, {2}), ReduceOp::Max);
  EXPECT_EQ(bf16_to_f32(m[0]), -1.0f);
  EXPECT_EQ(bf16_to_f32(m[1]), 0.25f * (n - 1));
}

TEST(TypedCollectives, U8GathersAndSumsModulo256) {
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 60.0);
  const int me = world_rank();
  std::vector<uint8_t> in = {static_cast<uint8_t>(40 * me), static_cast<uint8_t>(255 - me), 200};
  std::vector<uint8_t> all(3 * static_cast<size_t>(n));
  g.world->all_gather(in, all);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(all[3 * r], 40 * r);
    EXPECT_EQ(all[3 * r + 1], 255 - r);
    EXPECT_EQ(all[3 * r + 2], 200);
  }
  g.world->all_reduce_sum(in);
  EXPECT_EQ(in[2], (200 * n) % 256);
  std::vector<uint8_t> m = {static_cast<uint8_t>(250 + me)};
  g.world->all_reduce_max(m);
  EXPECT_EQ(m[0], 250 + n - 1);
}

TEST(TypedCollectives, TargetCountPastTwoToThe24IsExact) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 60.0);
  const int me = world_rank();
  int64_t count = me == 0 ? 9'000'001 : me == 1 ? 9'000'000 : 0;
  g.world->all_reduce_sum(std::span<int64_t>(&count, 1));
  EXPECT_EQ(count, 18'000'001);
  const float fp32 = 9'000'001.0f + 9'000'000.0f;
  EXPECT_EQ(fp32, 18'000'000.0f) << "an fp32 sum rounds to even past 2^24";
  EXPECT_NE(count, static_cast<int64_t>(fp32));
}

TEST(TypedCollectives, MismatchedDtypesAreRefusedNamingBoth) {
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 60.0);
  std::vector<float> in(2);
  std::vector<int32_t> out(2 * n);
  EXPECT_EQ(message_of<ShapeError>([&] {
              g.world->all_gather(TensorView(in.data(), DType::F32, {2}),
                                  TensorView(out.data(), DType::I32, {2 * n}));
            }),
            "all_gather on group world: in is f32 but out is i32 (they must be the same dtype)");
  EXPECT_EQ(g.world->sequence(), 0u);
}

TEST(TypedCollectives, MpiRefusesCudaViewsNamingTheOp) {
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 60.0);
  std::vector<float> x(4 * n);
  const TensorView cuda(x.data(), DType::F32, {4}, Device::CUDA);
  const Stream stream{Device::CUDA, nullptr};
  const std::string m = message_of<ShapeError>([&] { g.world->all_reduce(cuda, ReduceOp::Sum, stream); });
  EXPECT_TRUE(contains(m, "all_reduce_sum on group world: data is a cuda view")) << m;
  EXPECT_TRUE(contains(m, "Debian's Open MPI is not CUDA-aware")) << m;
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { g.world->broadcast(cuda, 0, stream); }),
                       "broadcast on group world: data is a cuda view"));
  const TensorView whole(x.data(), DType::F32, {4 * n}, Device::CUDA);
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { g.world->all_gather(cuda, whole, stream); }),
                       "all_gather on group world: in is a cuda view"));
  EXPECT_FALSE(g.world->supports(Device::CUDA));
  EXPECT_TRUE(g.world->supports(Device::CPU));
  EXPECT_EQ(g.world->sequence(), 0u) << "nothing was posted";
}

TEST(TypedCollectives, MpiDatatypes) {
  EXPECT_EQ(MpiCommunicator::mpi_datatype(DType::F32), MPI_FLOAT);
  EXPECT_EQ(MpiCommunicator::mpi_datatype(DType::F64), MPI_DOUBLE);
  EXPECT_EQ(MpiCommunicator::mpi_datatype(DType::I32), MPI_INT32_T);
  EXPECT_EQ(MpiCommunicator::mpi_datatype(DType::I64), MPI_INT64_T);
  EXPECT_EQ(MpiCommunicator::mpi_datatype(DType::U8), MPI_UINT8_T);
  EXPECT_EQ(MpiCommunicator::mpi_datatype(DType::BF16), MPI_UINT16_T);
}

// Strings of different lengths — empty, with a NUL, longer than the others — arrive
// whole and in rank order.
TEST(StringGather, EveryRanksStringInRankOrder) {
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 60.0);
  auto text_of = [](int r) {
    if (r == 0) return std::string();
    std::string s = "rank " + std::to_string(r) + std::string(static_cast<size_t>(r) * 7, 'x');
    s[1] = '\0';
    return s;
  };
  const std::vector<std::string> got = all_gather_strings(*g.world, text_of(world_rank()));
  ASSERT_EQ(got.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], text_of(r)) << "rank " << r;
}

TEST(NodeRanks, RanksSharingAHostName) {
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 60.0);
  const int me = world_rank();
  // Pretend two ranks per host: host-0 holds ranks 0 and 1, host-1 ranks 2 and 3, ...
  const std::vector<int> got = ranks_sharing_host(*g.world, "host-" + std::to_string(me / 2));
  std::vector<int> want;
  for (int r = me / 2 * 2; r < std::min(n, me / 2 * 2 + 2); ++r) want.push_back(r);
  EXPECT_EQ(got, want);
  // Every rank of this test runs on this machine.
  std::vector<int> everyone(n);
  for (int r = 0; r < n; ++r) everyone[r] = r;
  EXPECT_EQ(node_ranks(g.world.get()), everyone);
  EXPECT_EQ(node_ranks(nullptr), std::vector<int>{0});
  EXPECT_FALSE(host_name().empty());
}

}  // namespace
}  // namespace olmo2::parallel
