// The shared-storage check's one message (docs/architecture.md §7 "Shared storage"):
// ranks grouped by host, the verb agreeing with them, the first rank's reason, and the
// checkpoint clause only for ranks that do see the save directory. The check itself runs
// over real mount namespaces in tests/launcher/test_train_mpi.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/train/shared_storage.h"

namespace olmo2 {
namespace {

TEST(SharedStorage, EveryRankSeeingBothIsNoFailure) {
  const std::vector<StorageSight> sights = {{0, "nodea", "", ""}, {1, "nodeb", "", ""}};
  EXPECT_EQ(storage_failure_message(sights, "/x", "/x/step-00000003"), "");
  EXPECT_EQ(storage_failure_message({}, "/x", ""), "");
}

TEST(SharedStorage, RanksThatDoNotSeeTheSaveDirectoryAreNamedByHost) {
  const std::vector<StorageSight> sights = {{0, "nodea", "", ""},
                                            {1, "nodea", "", ""},
                                            {2, "nodeb", "cannot open /x/.olmo2-probe-ab: No such file or directory", ""},
                                            {3, "nodeb", "cannot open /x/.olmo2-probe-ab: Permission denied", ""},
                                            {4, "nodec", "cannot open /x/.olmo2-probe-ab: No such file or directory", ""}};
  EXPECT_EQ(storage_failure_message(sights, "/x", ""),
            "ranks 2, 3 on nodeb and rank 4 on nodec do not see --save-dir /x (it is not shared storage): "
            "rank 2: cannot open /x/.olmo2-probe-ab: No such file or directory");
  const std::vector<StorageSight> one = {{0, "nodea", "", ""}, {1, "nodeb", "cannot open p: No such file", ""}};
  EXPECT_EQ(storage_failure_message(one, "/x", ""),
            "rank 1 on nodeb does not see --save-dir /x (it is not shared storage): rank 1: cannot open p: No such file");
}

TEST(SharedStorage, AnotherCheckpointIsAClauseOfItsOwn) {
  const std::vector<StorageSight> sights = {
      {0, "a", "", ""},
      {1, "b", "cannot open /x/.olmo2-probe-ab: No such file or directory", ""},
      {2, "c", "", "/x/step-00000003/training_state.json has XXH3-128 11, rank 0's has 22"},
      {3, "c", "", "/x/step-00000003/training_state.json has XXH3-128 11, rank 0's has 22"}};
  EXPECT_EQ(storage_failure_message(sights, "/x", "/x/step-00000003"),
            "rank 1 on b does not see --save-dir /x (it is not shared storage): rank 1: cannot open "
            "/x/.olmo2-probe-ab: No such file or directory; ranks 2, 3 on c do not see rank 0's checkpoint "
            "/x/step-00000003 (--save-dir /x is not the same storage on every node): rank 2: "
            "/x/step-00000003/training_state.json has XXH3-128 11, rank 0's has 22");
}

TEST(SharedStorage, OneProcessOrNoSaveDirectoryHasNothingToCheck) {
  EXPECT_NO_THROW(check_shared_storage(nullptr, "/nonexistent/never", ""));
  EXPECT_FALSE(std::filesystem::exists("/nonexistent/never"));
}

}  // namespace
}  // namespace olmo2
