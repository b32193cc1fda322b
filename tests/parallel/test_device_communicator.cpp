// The device communicators on GPUs (ctest labels gpu and mpi): NcclCommunicator and
// HostStagedCommunicator against MpiCommunicator on host copies of the same data (every
// value an integer, so sums are exact in every dtype and order cannot matter), and
// their timeouts. Every test skips on every rank alike unless every rank sees a GPU;
// each rank uses GPU (node-local rank mod GPU count), so under mpirun on one GPU the
// ranks share it: NCCL is then tested on one-rank groups and the host-staged path on
// the whole world.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ops/device_runtime.h"
#ifdef OLMO2_HAVE_CUDA
#include "ops/cuda/runtime.h"
#endif
#include "parallel/device_communicator.h"
#include "parallel/host_staged_communicator.h"
#include "parallel/nccl_communicator.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2::parallel {
namespace {

using ops::test::to_device;
using ops::test::to_host;
using test::message_of;
using test::world_rank;
using test::world_size;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Skips unless every rank sees a GPU (one all-reduce, so the decision is the same on
// every rank and no rank is left in a collective), then selects this rank's GPU.
class DeviceComm : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    const int mine = ops::gpu_count(&why);
    int least = 0;
    MPI_Allreduce(&mine, &least, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (least == 0) GTEST_SKIP() << "no GPU on " << (mine == 0 ? "this rank: " + why : "another rank");
    MPI_Comm node = MPI_COMM_NULL;
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    ASSERT_EQ(cudaSetDevice(local % mine), cudaSuccess);
  }
};

// A new MPI communicator of the ranks with `color` (world-rank order).
std::unique_ptr<MpiCommunicator> group(int color, const std::string& name, double timeout_s = 60.0) {
  MPI_Comm c = MPI_COMM_NULL;
  EXPECT_EQ(MPI_Comm_split(MPI_COMM_WORLD, color, world_rank(), &c), MPI_SUCCESS);
  return std::make_unique<MpiCommunicator>(c, name, timeout_s);
}

void set(const TensorView& v, int64_t i, double x) {
  switch (v.dtype()) {
    case DType::F32: static_cast<float*>(v.data())[i] = static_cast<float>(x); break;
    case DType::BF16: static_cast<uint16_t*>(v.data())[i] = f32_to_bf16(static_cast<float>(x)); break;
    case DType::F64: static_cast<double*>(v.data())[i] = x; break;
    case DType::I32: static_cast<int32_t*>(v.data())[i] = static_cast<int32_t>(x); break;
    case DType::I64: static_cast<int64_t*>(v.data())[i] = static_cast<int64_t>(x); break;
    case DType::U8: static_cast<uint8_t*>(v.data())[i] = static_cast<uint8_t>(x); break;
    default: FAIL() << "dtype " << dtype_name(v.dtype());
  }
}

// n integer values in [-3, 7] ([0, 10] for u8) that differ between ranks and salts.
Tensor values(DType dt, int64_t n, int rank, int salt) {
  Tensor t = Tensor::zeros({n}, dt);
  for (int64_t i = 0; i < n; ++i) set(t.view(), i, double((i * 3 + rank * 5 + salt) % 11) - (dt == DType::U8 ? 0 : 3));
  return t;
}

void expect_bytes_equal(const TensorView& want, const TensorView& got, const std::string& what) {
  ASSERT_EQ(want.bytes(), got.bytes()) << what;
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.bytes()), 0) << what;
}

const Stream kDevice{Device::CUDA, nullptr};  // the compute stream

// Every collective of `dev` on device views equals `ref`'s on host copies; `dev` and
// `ref` are communicators of the same ranks. Then the point-to-point calls between
// group ranks 0 and 1, and a host view through `dev`.
void expect_same_as_mpi(Communicator& dev, Communicator& ref, DType dt) {
  const int p = dev.size(), r = dev.rank();
  const int64_t n = 5;
  const std::string what = std::string(dtype_name(dt)) + " on " + dev.name();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    Tensor h = values(dt, n * p, r, 1), d = to_device(h.view());
    ref.all_reduce(h.view(), op);
    dev.all_reduce(d.view(), op, kDevice);
    expect_bytes_equal(h.view(), to_host(d.view()).view(), what + " all_reduce " + reduce_op_name(op));
    Tensor in = values(dt, n * p, r, 2), out = Tensor::zeros({n}, dt);
    Tensor din = to_device(in.view()), dout = to_device(out.view());
    ref.reduce_scatter(in.view(), out.view(), op);
    dev.reduce_scatter(din.view(), dout.view(), op, ops::default_stream(Device::CUDA));
    expect_bytes_equal(out.view(), to_host(dout.view()).view(), what + " reduce_scatter " + reduce_op_name(op));
  }
  Tensor in = values(dt, n, r, 3), out = Tensor::zeros({n * p}, dt);
  Tensor din = to_device(in.view()), dout = to_device(out.view());
  ref.all_gather(in.view(), out.view());
  dev.all_gather(din.view(), dout.view(), kDevice);
  expect_bytes_equal(out.view(), to_host(dout.view()).view(), what + " all_gather");
  Tensor b = values(dt, n, r, 4), db = to_device(b.view());
  ref.broadcast(b.view(), p - 1);
  dev.broadcast(db.view(), p - 1, kDevice);
  expect_bytes_equal(b.view(), to_host(db.view()).view(), what + " broadcast");
  Tensor hv = values(dt, n, r, 5), hw = values(dt, n, r, 5);  // a host view goes through MPI
  ref.all_reduce(hv.view(), ReduceOp::Sum);
  dev.all_reduce(hw.view(), ReduceOp::Sum);
  expect_bytes_equal(hv.view(), hw.view(), what + " host all_reduce");
  if (p >= 2 && r < 2) {
    const int peer = 1 - r;
    Tensor mine = values(dt, n, r, 6), theirs = values(dt, n, peer, 6), got = Tensor::zeros({n}, dt);
    Tensor dmine = to_device(mine.view()), dgot = to_device(got.view());
    if (r == 0) dev.send(dmine.view(), 1, 7, kDevice);
    if (r == 1) dev.recv(dgot.view(), 0, 7, kDevice);
    if (r == 1) expect_bytes_equal(theirs.view(), to_host(dgot.view()).view(), what + " recv");
    Tensor big = values(dt, 1 << 18, r, 7), want = values(dt, 1 << 18, peer, 7);
    Tensor dbig = to_device(big.view()), dback = Tensor::zeros({1 << 18}, dt, Device::CUDA);
    dev.send_recv(dbig.view(), dback.view(), peer, 10 + r, 10 + peer, kDevice);
    expect_bytes_equal(want.view(), to_host(dback.view()).view(), what + " send_recv");
  }
  // Both carry the same group, issue for issue: their sequences agree on every rank.
  const int64_t seq = static_cast<int64_t>(dev.sequence());
  std::vector<int64_t> all(static_cast<size_t>(p));
  ref.all_gather(std::span<const int64_t>(&seq, 1), all);
  for (int64_t s : all) EXPECT_EQ(s, seq) << what;
}

const DType kDtypes[] = {DType::F32, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8};

TEST_F(DeviceComm, NcclOnOneRankGroupsMatchesMpi) {
  auto ref = group(world_rank(), "solo");
  auto dev = std::make_unique<NcclCommunicator>(group(world_rank(), "solo"));
  EXPECT_EQ(dev->sequence(), 1u) << "the unique id's broadcast is collective #1";
  EXPECT_TRUE(dev->supports(Device::CUDA));
  for (DType dt : kDtypes) expect_same_as_mpi(*dev, *ref, dt);
  Tensor empty = Tensor::zeros({0}, DType::F32, Device::CUDA);
  const uint64_t before = dev->sequence();
  dev->all_reduce(empty.view(), ReduceOp::Sum, kDevice);  // nothing enqueued, still counted
  EXPECT_EQ(dev->sequence(), before + 1);
}

TEST_F(DeviceComm, NcclAcrossRanksMatchesMpi) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  auto ref = group(0, "world");
  const GpuPlacement where = gpu_placement(*ref, ops::gpu_identity(ops::current_gpu()));
  if (!where.distinct) GTEST_SKIP() << "the ranks share GPUs (not on this machine): " << where.description;
  EXPECT_EQ(where.description, "NCCL");
  auto dev = make_device_communicator(group(0, "world"), where.distinct);
  ASSERT_NE(dynamic_cast<NcclCommunicator*>(dev.get()), nullptr);
  for (DType dt : kDtypes) expect_same_as_mpi(*dev, *ref, dt);
}

TEST_F(DeviceComm, HostStagedMatchesMpi) {
  auto ref = group(0, "world");
  const GpuPlacement where = gpu_placement(*ref, ops::gpu_identity(ops::current_gpu()));
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  if (world_size() == 2 && gpus == 1) {
    // Named by its PCI bus id, the GPU's identity (whatever CUDA_VISIBLE_DEVICES says).
    char bus[32] = {};
    ASSERT_EQ(cudaDeviceGetPCIBusId(bus, static_cast<int>(sizeof bus), 0), cudaSuccess);
    EXPECT_EQ(where.description, "host-staged MPI (2 ranks share GPU " + std::string(bus) + ")");
  }
  auto dev = make_device_communicator(group(0, "tp"), /*distinct_gpus=*/false);
  ASSERT_NE(dynamic_cast<HostStagedCommunicator*>(dev.get()), nullptr);
  for (DType dt : kDtypes) expect_same_as_mpi(*dev, *ref, dt);
}

// A rank that skips a collective: the others get CollectiveTimeout naming it.
TEST_F(DeviceComm, HostStagedTimeoutNamesTheCollectiveAndGroup) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  auto sync = group(0, "sync");
  HostStagedCommunicator tp(group(0, "tp", 1.0));
  Tensor x = to_device(values(DType::F32, 16, 0, 0).view());
  const bool skipper = tp.rank() == tp.size() - 1;
  if (!skipper) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string m = message_of<CollectiveTimeout>([&] { tp.all_reduce(x.view(), ReduceOp::Sum, kDevice); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(contains(m, "rank " + std::to_string(world_rank()) + " (tp rank " + std::to_string(tp.rank()) + " of " +
                                std::to_string(tp.size()) + "): all_reduce_sum #1 on group tp timed out after"))
        << m;
    EXPECT_TRUE(contains(m, "(16 f32)")) << m;
    EXPECT_LT(s, 6.0);
    EXPECT_THROW(tp.all_reduce(x.view(), ReduceOp::Sum, kDevice), Error) << "refused while pending";
  }
  sync->barrier();
  tp.set_timeout(30.0);
  if (skipper) {
    tp.all_reduce(x.view(), ReduceOp::Sum, kDevice);  // joins late: the pending ones complete
  } else {
    tp.wait_pending();
  }
  EXPECT_EQ(tp.pending(), "");
}

// Waits (at most 20 s) for the communicator's watchdog to record a failure.
bool watchdog_fires(const NcclCommunicator& c) {
  for (int i = 0; i < 2000 && !c.watchdog_fired(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return c.watchdog_fired();
}

TEST_F(DeviceComm, NcclTimeoutAbortsAndNamesTheCollective) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  auto sync = group(0, "sync");
  const GpuPlacement where = gpu_placement(*sync, ops::gpu_identity(ops::current_gpu()));
  if (!where.distinct) GTEST_SKIP() << "the ranks share GPUs (not on this machine): " << where.description;
  {
    NcclCommunicator dp(group(0, "dp"));  // initialisation may take seconds
    dp.set_timeout(1.0);
    Tensor x = to_device(values(DType::BF16, 1024, 0, 0).view());
    if (dp.rank() != dp.size() - 1) {  // the last rank skips the all-reduce
      // The call returns once enqueued: the host does not wait for the GPU.
      const auto t0 = std::chrono::steady_clock::now();
      dp.all_reduce(x.view(), ReduceOp::Max, kDevice);
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.9);
      ASSERT_TRUE(watchdog_fires(dp));
      const std::string m = message_of<CollectiveTimeout>([&] { dp.check_health(); });
      EXPECT_TRUE(contains(m, "): all_reduce_max #2 on group dp timed out after")) << m;
      EXPECT_TRUE(contains(m, "(1024 bf16)")) << m;
      EXPECT_TRUE(dp.aborted());
      EXPECT_TRUE(contains(dp.pending(), "all_reduce_max #2 on group dp")) << dp.pending();
      EXPECT_TRUE(contains(message_of<Error>([&] { dp.all_reduce(x.view(), ReduceOp::Sum, kDevice); }), "aborted"));
      EXPECT_THROW(dp.wait_pending(), Error);
      // Every later wait for the stream says what failed.
      EXPECT_TRUE(contains(message_of<Error>([&] { ops::cuda::synchronize(); }), "timed out")) << "synchronize";
      ops::cuda::clear_async_failure();
    }
    sync->barrier();
  }
  sync->barrier();
}

// A rank whose peer aborted the communicator (its send met no receive and timed out)
// and left: this rank's teardown finalises, and the peer never joins that, so the
// destructor must give up within its bound and abort instead of waiting forever.
TEST_F(DeviceComm, NcclTeardownEndsWhenThePeerAborted) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  auto sync = group(0, "sync");
  const GpuPlacement where = gpu_placement(*sync, ops::gpu_identity(ops::current_gpu()));
  if (!where.distinct) GTEST_SKIP() << "the ranks share GPUs (not on this machine): " << where.description;
  double teardown_s = 0;
  {
    auto dp = std::make_unique<NcclCommunicator>(group(0, "dp"));
    dp->set_timeout(1.0);
    Tensor x = to_device(values(DType::F32, 1 << 16, 0, 0).view());
    if (dp->rank() == 0) {
      dp->send(x.view(), 1, 3, kDevice);  // no receive is ever posted for it
      ASSERT_TRUE(watchdog_fires(*dp));
      EXPECT_TRUE(dp->aborted());
      ops::cuda::clear_async_failure();
      dp.reset();  // the aborted communicator ends at once
    }
    sync->barrier();  // rank 0 has left; the others end theirs now
    const auto t0 = std::chrono::steady_clock::now();
    dp.reset();
    teardown_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  EXPECT_LT(teardown_s, 6.0) << "the destructor waits at most the group's timeout (1 s) to finalise";
  sync->barrier();
}

// One rank: a stream blocked by a host function never reaches the all-reduce; the call
// returns at once, and the watchdog times it out and aborts the communicator. A helper
// thread unblocks the stream later (ncclCommAbort may wait for the device). Last: it
// leaves NCCL work behind an abort.
TEST_F(DeviceComm, NcclTimeoutOnABlockedStream) {
  std::atomic<bool> release{false};
  {
    NcclCommunicator solo(group(world_rank(), "solo"));
    solo.set_timeout(0.5);
    Tensor x = to_device(values(DType::F32, 64, 0, 0).view());
    cudaStream_t s = static_cast<cudaStream_t>(ops::default_stream(Device::CUDA).handle);
    ASSERT_EQ(cudaLaunchHostFunc(
                  s, [](void* flag) { while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield(); },
                  &release),
              cudaSuccess);
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      release = true;
    });
    const auto t0 = std::chrono::steady_clock::now();
    solo.all_reduce(x.view(), ReduceOp::Sum, kDevice);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.45);
    ASSERT_TRUE(watchdog_fires(solo));
    const std::string m = message_of<CollectiveTimeout>([&] { solo.check_health(); });
    EXPECT_TRUE(contains(m, " (solo rank 0 of 1): all_reduce_sum #2 on group solo timed out after 0.")) << m;
    EXPECT_TRUE(solo.aborted());
    releaser.join();
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ops::cuda::clear_async_failure();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace olmo2::parallel
