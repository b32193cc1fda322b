// The checks every Communicator call passes before an implementation sees it, the
// dtypes the host-span conveniences choose, and TimedCommunicator's byte accounting per
// dtype; in one process, over an in-process FakeCommunicator (no MPI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/timed_communicator.h"
#include "tests/parallel/fake_communicator.h"

namespace olmo2::parallel {
namespace {

using test::FakeCommunicator;

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(CommunicatorChecks, MismatchedDtypesNameBoth) {
  FakeCommunicator c(0, 2);
  std::vector<float> f(2);
  std::vector<int32_t> i(4);
  std::vector<int64_t> l(2);
  const TensorView in(f.data(), DType::F32, {2}), out(i.data(), DType::I32, {4});
  EXPECT_EQ(message_of<ShapeError>([&] { c.all_gather(in, out); }),
            "all_gather on group fake: in is f32 but out is i32 (they must be the same dtype)");
  const TensorView whole(i.data(), DType::I32, {4}), part(l.data(), DType::I64, {2});
  EXPECT_EQ(message_of<ShapeError>([&] { c.reduce_scatter(whole, part, ReduceOp::Sum); }),
            "reduce_scatter_sum on group fake: in is i32 but out is i64 (they must be the same "
            "dtype)");
  EXPECT_EQ(message_of<ShapeError>([&] { c.send_recv(in, part, 1, 0, 0); }),
            "send_recv on group fake: out is f32 but in is i64 (they must be the same dtype)");
  EXPECT_TRUE(c.calls().empty()) << "a refused call reaches no implementation";
  EXPECT_EQ(c.sequence(), 0u);
}

TEST(CommunicatorChecks, MismatchedSizesNameBoth) {
  FakeCommunicator c(1, 3);
  std::vector<double> in(2), out(7);
  EXPECT_EQ(message_of<ShapeError>([&] { c.all_gather(in, out); }),
            "all_gather on group fake: out has 7 f64, expected 3 ranks × in 2 = 6");
  std::vector<uint8_t> whole(10), part(3);
  EXPECT_EQ(message_of<ShapeError>([&] { c.reduce_scatter_sum(whole, part); }),
            "reduce_scatter_sum on group fake: in has 10 u8, expected 3 ranks × out 3 = 9");
  EXPECT_TRUE(c.calls().empty());
}

TEST(CommunicatorChecks, DevicesStreamsLayoutsAndDtypesAreChecked) {
  FakeCommunicator c(0, 2);
  std::vector<float> x(6);
  const TensorView cuda(x.data(), DType::F32, {6}, Device::CUDA);
  EXPECT_EQ(message_of<ShapeError>([&] { c.all_reduce(cuda, ReduceOp::Max); }),
            "all_reduce_max on group fake: data is a cuda view, which this communicator does not "
            "carry");
  const TensorView host(x.data(), DType::F32, {6});
  EXPECT_EQ(message_of<ShapeError>([&] { c.broadcast(host, 0, Stream{Device::CUDA, nullptr}); }),
            "broadcast on group fake: data is on cpu but the stream is on cuda");
  const TensorView columns = TensorView(x.data(), DType::F32, {2, 3}).cols(0, 2);
  EXPECT_EQ(message_of<ShapeError>([&] { c.send(columns, 1, 0); }),
            "send on group fake: data [2, 2] with strides [3, 1] is not contiguous");
  const TensorView half(x.data(), DType::F16, {4});
  EXPECT_EQ(message_of<ShapeError>([&] { c.all_reduce(half, ReduceOp::Sum); }),
            "all_reduce_sum on group fake: f16 cannot be reduced (reductions take f32, bf16, f64, "
            "i32, i64, u8)");
  const TensorView null(nullptr, DType::I64, {3});
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { c.recv(null, 1, 0); }), "null pointer"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { c.broadcast(host, 2); }),
                       "broadcast on group fake: root 2 out of range [0, 2)"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { c.send(host, 0, 0); }), "peer 0"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { c.recv(host, 1, 32768); }),
                       "tag 32768 out of range [0, 32767]"));
  EXPECT_TRUE(c.calls().empty());
  // A dimension of one element may have any stride; moving f16 is allowed.
  const TensorView row = TensorView(x.data(), DType::F32, {2, 3}).rows(1, 2);
  c.broadcast(TensorView(row.data(), DType::F32, {1, 3}, {99, 1}, Device::CPU), 0);
  c.broadcast(half, 0);
  ASSERT_EQ(c.calls().size(), 2u);
  EXPECT_EQ(c.calls()[1].dtype, DType::F16);
}

TEST(CommunicatorChecks, SpanConveniencesCarryTheirElementType) {
  FakeCommunicator c(0, 2, [](int, const TensorView& v) {
    if (v.dtype() == DType::I64) v.data_as<int64_t>()[0] = int64_t{1} << 40;
  });
  std::vector<float> f(1);
  std::vector<double> d(1);
  std::vector<int32_t> i(1);
  std::vector<int64_t> l(1, 5);
  std::vector<uint8_t> u(1);
  std::vector<std::byte> b(3);
  uint64_t fp = 7;
  c.all_reduce_sum(f);
  c.all_reduce_max(d);
  c.all_reduce_sum(i);
  c.all_reduce_sum(l);
  c.all_reduce_max(u);
  c.broadcast(std::span<std::byte>(b), 0);
  c.broadcast(std::span<uint64_t>(&fp, 1), 1);
  const std::vector<FakeCommunicator::Call> want = {
      {"all_reduce_sum", DType::F32, 1}, {"all_reduce_max", DType::F64, 1},
      {"all_reduce_sum", DType::I32, 1}, {"all_reduce_sum", DType::I64, 1},
      {"all_reduce_max", DType::U8, 1},  {"broadcast", DType::U8, 3},
      {"broadcast", DType::I64, 1}};
  ASSERT_EQ(c.calls().size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(c.calls()[k].op, want[k].op) << k;
    EXPECT_EQ(c.calls()[k].dtype, want[k].dtype) << k;
    EXPECT_EQ(c.calls()[k].count, want[k].count) << k;
  }
  EXPECT_EQ(l[0], 5 + (int64_t{1} << 40));
  EXPECT_EQ(fp, uint64_t{1} << 40) << "u64 moves as i64 words, bit for bit";
  EXPECT_EQ(c.sequence(), 7u);
}

// A communicator without a non-blocking all-gather (the default do_all_gather_start)
// runs the blocking one at start: the handle is complete and the output there.
TEST(CommunicatorChecks, AllGatherStartFallsBackToTheBlockingCall) {
  FakeCommunicator c(1, 2, [](int peer, const TensorView& into) {
    std::fill_n(static_cast<float*>(into.data()), into.numel(), 7.0f + static_cast<float>(peer));
  });
  std::vector<float> in{3.0f, 4.0f}, out(4);
  AsyncHandle h = c.all_gather_start(host_view(in), host_view(out));
  EXPECT_FALSE(h.pending());
  h.wait();
  EXPECT_EQ(out, (std::vector<float>{7.0f, 7.0f, 3.0f, 4.0f}));
  ASSERT_EQ(c.calls().size(), 1u);
  EXPECT_EQ(c.calls()[0].op, "all_gather");
  std::vector<float> wrong(3);
  EXPECT_THROW(c.all_gather_start(host_view(in), host_view(wrong)), ShapeError);
}

TEST(TimedCommunicator, CountsBytesFromDtypeSizes) {
  auto fake = std::make_unique<FakeCommunicator>(0, 2);
  TimedCommunicator t(std::move(fake));
  std::vector<double> d(3);
  t.all_reduce_sum(d);  // 3 × 8
  std::vector<uint16_t> bits(4);
  t.all_reduce(TensorView(bits.data(), DType::BF16, {4}), ReduceOp::Max);  // 4 × 2
  std::vector<uint8_t> u(5), gathered(10);
  t.all_gather(u, gathered);  // out: 10 × 1
  std::vector<int64_t> whole(6), part(3);
  t.reduce_scatter_sum(whole, part);  // in: 6 × 8
  t.reduce_scatter(TensorView(whole.data(), DType::I64, {6}), TensorView(part.data(), DType::I64, {3}),
                   ReduceOp::Max);  // 48
  std::vector<int32_t> ids(7);
  t.broadcast(ids, 0);  // 28
  t.send(std::span<const int32_t>(ids), 1, 3);  // 28
  std::vector<std::byte> bytes(9);
  t.recv(std::span<std::byte>(bytes), 1, 3);  // 9
  std::vector<float> out(2), in(5);
  t.send_recv(out, in, 1, 1, 2);  // (2 + 5) × 4
  t.barrier();
  EXPECT_EQ(t.stats(CommOp::all_reduce_sum).bytes, 24u);
  EXPECT_EQ(t.stats(CommOp::all_reduce_max).bytes, 8u);
  EXPECT_EQ(t.stats(CommOp::all_gather).bytes, 10u);
  EXPECT_EQ(t.stats(CommOp::reduce_scatter_sum).bytes, 48u);
  EXPECT_EQ(t.stats(CommOp::reduce_scatter_max).bytes, 48u);
  EXPECT_EQ(t.stats(CommOp::broadcast).bytes, 28u);
  EXPECT_EQ(t.stats(CommOp::send).bytes, 28u);
  EXPECT_EQ(t.stats(CommOp::recv).bytes, 9u);
  EXPECT_EQ(t.stats(CommOp::send_recv).bytes, 28u);
  EXPECT_EQ(t.stats(CommOp::barrier).bytes, 0u);
  EXPECT_EQ(t.total_bytes(), 24u + 8 + 10 + 48 + 48 + 28 + 28 + 9 + 28);
  EXPECT_EQ(t.total_calls(), 10u);
  EXPECT_EQ(t.sequence(), 7u) << "collectives counted by the inner communicator";
  EXPECT_STREQ(to_string(CommOp::reduce_scatter_max), "reduce_scatter_max");
  // A call the checks refuse is neither forwarded nor counted.
  std::vector<int32_t> wrong(3);
  EXPECT_THROW(t.all_gather(TensorView(u.data(), DType::U8, {5}), TensorView(wrong.data(), DType::I32, {3})),
               ShapeError);
  EXPECT_EQ(t.total_calls(), 10u);
  t.reset();
  EXPECT_EQ(t.total_bytes(), 0u);
}

}  // namespace
}  // namespace olmo2::parallel
