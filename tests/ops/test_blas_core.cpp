// Which OpenBLAS kernels to ask for (ops/blas_core.h): only where OpenBLAS fell back to
// generic ones, never over the user's OPENBLAS_CORETYPE.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "ops/blas_core.h"

namespace olmo2 {
namespace {

TEST(BlasCore, AnUpgradeOnlyFromGenericKernelsAndNeverOverTheUsersChoice) {
  const std::string core = blas_core_name();
  EXPECT_FALSE(core.empty());
  const char* given = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = given ? given : "";
  ::unsetenv("OPENBLAS_CORETYPE");
  const std::string up = blas_core_upgrade();
  EXPECT_TRUE(up.empty() || up == "SkylakeX" || up == "Haswell") << up;
  const std::set<std::string> vector_cores = {"Haswell", "SkylakeX", "Zen", "CooperLake", "SapphireRapids"};
  if (vector_cores.count(core)) EXPECT_EQ(up, "") << "OpenBLAS runs " << core << " already";
  ::setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  EXPECT_EQ(blas_core_upgrade(), "");
  if (given) ::setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else ::unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace
}  // namespace olmo2
