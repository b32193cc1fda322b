// Where the tests find the source tree, the olmo2 binary and mpirun: the paths CMake
// built them with (OLMO2_SOURCE_DIR, OLMO2_BINARY, OLMO2_MPIEXEC, given to each test
// target), unless the environment names others — OLMO2_TEST_SOURCE_DIR,
// OLMO2_TEST_BINARY, OLMO2_TEST_MPIEXEC — as the GPU check bundle does on a machine
// where the tree and the binaries sit elsewhere (scripts/gpu_bundle.sh,
// docs/architecture.md §10). Force-included into every test source (tests/CMakeLists.txt),
// so every use of the three macros reads the environment first.
#pragma once

#include <cstdlib>

namespace olmo2::test_paths {
/// $var when it is set and not empty, else `built`.
inline const char* from_environment(const char* var, const char* built) {
  const char* v = std::getenv(var);
  return v && *v ? v : built;
}
}  // namespace olmo2::test_paths

#ifdef OLMO2_SOURCE_DIR
namespace olmo2::test_paths {
inline const char* built_source_dir() { return OLMO2_SOURCE_DIR; }
}  // namespace olmo2::test_paths
#undef OLMO2_SOURCE_DIR
#define OLMO2_SOURCE_DIR \
  (::olmo2::test_paths::from_environment("OLMO2_TEST_SOURCE_DIR", ::olmo2::test_paths::built_source_dir()))
#endif

#ifdef OLMO2_BINARY
namespace olmo2::test_paths {
inline const char* built_binary() { return OLMO2_BINARY; }
}  // namespace olmo2::test_paths
#undef OLMO2_BINARY
#define OLMO2_BINARY (::olmo2::test_paths::from_environment("OLMO2_TEST_BINARY", ::olmo2::test_paths::built_binary()))
#endif

#ifdef OLMO2_MPIEXEC
namespace olmo2::test_paths {
inline const char* built_mpiexec() { return OLMO2_MPIEXEC; }
}  // namespace olmo2::test_paths
#undef OLMO2_MPIEXEC
#define OLMO2_MPIEXEC \
  (::olmo2::test_paths::from_environment("OLMO2_TEST_MPIEXEC", ::olmo2::test_paths::built_mpiexec()))
#endif
