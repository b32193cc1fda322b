#include "parallel/process_groups.h"

#include <mpi.h>

#include "core/error.h"
#include "parallel/mpi_communicator.h"

namespace olmo2::parallel {

namespace {

void check(int rc, const char* call, const char* group) {
  if (rc != MPI_SUCCESS) OLMO2_THROW(Error, call, " failed making group ", group, ": error ", rc);
}

std::unique_ptr<Communicator> split(MPI_Comm parent, int color, int key, const char* name,
                                    int expected_rank, double timeout_s) {
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_split(parent, color, key, &comm), "MPI_Comm_split", name);
  auto c = std::make_unique<MpiCommunicator>(comm, name, timeout_s);
  if (c->rank() != expected_rank) {
    OLMO2_THROW(Error, "group ", name, ": MPI rank ", c->rank(), " ≠ coordinate ", expected_rank,
                " (color ", color, ", key ", key, ")");
  }
  return c;
}

}  // namespace

std::unique_ptr<Communicator> make_world_communicator(double timeout_s) {
  if (!(timeout_s >= 0)) {
    OLMO2_THROW(InputError, "collective timeout ", timeout_s, " s must be ≥ 0 (0 = wait forever)");
  }
  MPI_Comm world = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup", "world");
  return std::make_unique<MpiCommunicator>(world, "world", timeout_s);
}

ProcessGroups make_process_groups(const Topology& topology, double timeout_s) {
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (topology.world() != world_size) {
    OLMO2_THROW(InputError, "layout ", to_string(topology.layout()), " = ", topology.world(),
                " ranks, but MPI started ", world_size);
  }
  if (!(timeout_s >= 0)) {
    OLMO2_THROW(InputError, "collective timeout ", timeout_s, " s must be ≥ 0 (0 = wait forever)");
  }
  ProcessGroups g;
  g.topology = topology;
  const Coords c = topology.coords(world_rank);

  // The order below is the same on every rank: each call is collective over the world.
  MPI_Comm world = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup", "world");
  g.world = std::make_unique<MpiCommunicator>(world, "world", timeout_s);
  g.tp = split(world, topology.tp_color(world_rank), world_rank, "tp", c.tp, timeout_s);
  g.dp = split(world, topology.dp_color(world_rank), world_rank, "dp", c.dp, timeout_s);
  g.pp = split(world, topology.pp_color(world_rank), world_rank, "pp", c.pp, timeout_s);
  g.cp = split(world, topology.cp_color(world_rank), world_rank, "cp", c.cp, timeout_s);

  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type", "node");
  MPI_Comm_rank(node, &g.local_rank);
  MPI_Comm_size(node, &g.local_size);
  MPI_Comm_free(&node);
  return g;
}

void wrap_communicators(ProcessGroups& g, const CommunicatorFactory& make) {
  for (std::unique_ptr<Communicator>* c : {&g.world, &g.tp, &g.dp, &g.pp, &g.cp}) {
    *c = make(std::move(*c));
    OLMO2_CHECK(*c, "wrap_communicators: the factory returned no communicator");
  }
}

}  // namespace olmo2::parallel
