// gpu_placement and make_device_communicator's refusals: no GPU needed (the GPU ordinals
// are given), so these run in every build under mpirun.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/device_communicator.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2::parallel {
namespace {

std::unique_ptr<MpiCommunicator> world_copy() {
  MPI_Comm c = MPI_COMM_NULL;
  EXPECT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &c), MPI_SUCCESS);
  return std::make_unique<MpiCommunicator>(c, "world", 30.0);
}

TEST(GpuPlacement, RanksOnOneGpuAreNotDistinct) {
  auto world = world_copy();  // every rank of these tests runs on one host
  const int n = world->size();
  const GpuPlacement same = gpu_placement(*world, "0000:3B:00.0");
  EXPECT_EQ(same.distinct, n == 1);
  EXPECT_EQ(same.description,
            n == 1 ? "NCCL" : "host-staged MPI (" + std::to_string(n) + " ranks share GPU 0000:3B:00.0)");
  // Each rank's own GPU by identity, though every one may be "GPU 0" to itself
  // (per-rank CUDA_VISIBLE_DEVICES): distinct.
  const GpuPlacement own = gpu_placement(*world, "GPU-bus-" + std::to_string(world->rank()));
  EXPECT_TRUE(own.distinct);
  EXPECT_EQ(own.description, "NCCL");
  if (n >= 3) {  // ranks 0 and 1 on one GPU, the others on GPUs of their own
    const GpuPlacement two = gpu_placement(*world, world->rank() < 2 ? "bus-5" : "bus-1" + std::to_string(world->rank()));
    EXPECT_FALSE(two.distinct);
    EXPECT_EQ(two.description, "host-staged MPI (2 ranks share GPU bus-5)");
  }
}

TEST(GpuPlacement, MakeDeviceCommunicatorRefusesNoGroup) {
  EXPECT_THROW(make_device_communicator(std::unique_ptr<MpiCommunicator>(), true), Error);
  EXPECT_THROW(make_device_communicator(std::unique_ptr<Communicator>(), true), Error);
}

}  // namespace
}  // namespace olmo2::parallel
