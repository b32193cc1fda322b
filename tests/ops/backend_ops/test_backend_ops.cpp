// The backend test (docs/architecture.md §10, "The op table and its test"), in the
// manner of llama.cpp's test-backend-ops: walks the op table (ops/op_list.h) and runs
// each op's case (cases_*.cpp) on the device this process has — a GPU, the SIMT executor
// of the OLMO2_CUDA_ON_CPU build, or the emulated device (OLMO2_DEVICE_EMULATION=1) —
// against ops::cpu::. An op of the table without a case, or a case naming no op, fails.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "ops/device_runtime.h"
#include "ops/op_list.h"
#include "tests/ops/backend_ops/backend_case.h"

namespace olmo2::ops::test {
namespace {

std::vector<std::string> table_ops() {
  std::vector<std::string> names;
  for (const OpTableEntry& e : kOpTable) names.emplace_back(e.name);
  return names;
}

TEST(BackendOps, EveryOpOfTheTableHasACaseAndEveryCaseAnOp) {
  const std::vector<std::string> ops = table_ops();
  const std::set<std::string> in_table(ops.begin(), ops.end());
  EXPECT_EQ(in_table.size(), ops.size()) << "an op is listed twice in ops/op_list.h";
  for (const std::string& op : ops)
    EXPECT_TRUE(op_cases().count(op)) << "op " << op << " of ops/op_list.h has no case in tests/ops/backend_ops/";
  for (const auto& [name, run] : op_cases())
    EXPECT_TRUE(in_table.count(name)) << "case " << name << " names no op of ops/op_list.h";
}

/// The name of the device this process computes Device::CUDA on.
std::string device_label() {
  if (device_is_emulated()) return "the emulated device (the CPU ops)";
#ifdef OLMO2_CUDA_ON_CPU
  return "the SIMT executor (the CUDA backend's source on the CPU)";
#else
  return "the GPU";
#endif
}

class BackendOp : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendOp, MatchesTheCpu) {
  std::string why;
  if (gpu_count(&why) == 0) GTEST_SKIP() << "no GPU and no emulation: " << why;
  const auto it = op_cases().find(GetParam());
  ASSERT_NE(it, op_cases().end()) << "no case for " << GetParam();
  const OpTableEntry* entry = nullptr;
  for (const OpTableEntry& e : kOpTable)
    if (GetParam() == e.name) entry = &e;
  ASSERT_NE(entry, nullptr);
  if ((entry->devices & kOnCuda) == 0) GTEST_SKIP() << GetParam() << " has no CUDA implementation in the table";
  RecordProperty("device", device_label());
  SCOPED_TRACE(GetParam() + " on " + device_label());
  it->second();
}

INSTANTIATE_TEST_SUITE_P(Table, BackendOp, ::testing::ValuesIn(table_ops()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace olmo2::ops::test
