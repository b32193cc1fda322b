// A temporary directory every MPI rank sees under one name (tests of training under
// mpirun: configs, token files and checkpoints shared by the ranks).
#pragma once

#include <mpi.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "parallel/agreement.h"
#include "parallel/process_groups.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2 {

/// A directory every rank sees under the same name: rank 0 makes it, all learn its name.
class SharedDir {
 public:
  SharedDir() {
    std::string path;
    if (parallel::test::world_rank() == 0) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "olmo2-dist-XXXXXX").string();
      if (!mkdtemp(tmpl.data())) std::abort();
      path = tmpl;
    }
    auto g = parallel::make_process_groups(parallel::Topology::make(parallel::test::world_size(), 1, 1, 0), 60.0);
    parallel::broadcast_string(*g.world, path, 0);
    path_ = path;
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (parallel::test::world_rank() == 0) std::filesystem::remove_all(path_);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace olmo2
