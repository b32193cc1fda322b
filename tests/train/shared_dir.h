// A temporary directory every rank of an MPI test sees under the same name (the ranks of
// these tests share one file system).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "parallel/agreement.h"
#include "parallel/process_groups.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2::test {

/// A directory every rank sees under the same name: rank 0 makes it, all learn its name;
/// rank 0 removes it (after a barrier) when it goes.
class SharedDir {
 public:
  SharedDir() {
    namespace fs = std::filesystem;
    using parallel::test::world_rank;
    std::string path;
    if (world_rank() == 0) {
      std::string tmpl = (fs::temp_directory_path() / "olmo2-dist-XXXXXX").string();
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
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace olmo2::test
