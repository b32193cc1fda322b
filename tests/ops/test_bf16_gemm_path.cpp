// Which code path the bf16 products take (ops/bf16_gemm.h): the fastest this CPU has,
// OLMO2_BF16_GEMM's choice, clear errors for a value that names no path or a path the
// CPU lacks, and the test override.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ops/bf16_gemm.h"
#include "ops/cpu/bf16_gemm_detail.h"
#include "ops/gemm.h"
#include "tests/ops/bf16_tensor.h"

namespace olmo2::ops {
namespace {

using detail::choose_bf16_gemm_path;

constexpr Bf16GemmPath kAll[] = {Bf16GemmPath::Avx512Bf16, Bf16GemmPath::Avx2,
                                 Bf16GemmPath::Portable, Bf16GemmPath::OneDnn};

// Pretend CPUs for choose_bf16_gemm_path.
bool every_path(Bf16GemmPath) { return true; }
bool avx2_cpu(Bf16GemmPath p) { return p != Bf16GemmPath::Avx512Bf16; }
bool plain_cpu(Bf16GemmPath p) { return p == Bf16GemmPath::Portable || p == Bf16GemmPath::OneDnn; }

// The InputError message of choose_bf16_gemm_path(env, available); "" when none.
std::string choice_error(const char* env, bool (*available)(Bf16GemmPath)) {
  try {
    choose_bf16_gemm_path(env, available);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Bf16GemmPath, NamesAsTheVariableSpellsThem) {
  EXPECT_STREQ(bf16_gemm_path_name(Bf16GemmPath::Avx512Bf16), "avx512bf16");
  EXPECT_STREQ(bf16_gemm_path_name(Bf16GemmPath::Avx2), "avx2");
  EXPECT_STREQ(bf16_gemm_path_name(Bf16GemmPath::Portable), "portable");
  EXPECT_STREQ(bf16_gemm_path_name(Bf16GemmPath::OneDnn), "onednn");
  EXPECT_TRUE(bf16_gemm_path_available(Bf16GemmPath::Portable));
  // oneDNN 2.6 makes a bf16 matmul from avx512_core on; an AVX2-only CPU (AMD Zen 3) has
  // none, and the OneDnn tests skip there.
  const bool avx512_core = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512_core) EXPECT_TRUE(bf16_gemm_path_available(Bf16GemmPath::OneDnn));
}

TEST(Bf16GemmPath, UnsetOrEmptyTakesTheFastestPathTheCpuHas) {
  for (const char* env : {static_cast<const char*>(nullptr), ""}) {
    EXPECT_EQ(choose_bf16_gemm_path(env, every_path), Bf16GemmPath::Avx512Bf16);
    EXPECT_EQ(choose_bf16_gemm_path(env, avx2_cpu), Bf16GemmPath::Avx2);
    EXPECT_EQ(choose_bf16_gemm_path(env, plain_cpu), Bf16GemmPath::Portable);
  }
  if (std::getenv("OLMO2_BF16_GEMM") == nullptr) {
    const Bf16GemmPath fastest = choose_bf16_gemm_path(nullptr, bf16_gemm_path_available);
    EXPECT_EQ(bf16_gemm_path(), fastest);
    EXPECT_STREQ(bf16_gemm_path_name(), bf16_gemm_path_name(fastest));
  }
}

TEST(Bf16GemmPath, TheVariableNamesAPath) {
  for (Bf16GemmPath p : kAll)
    EXPECT_EQ(choose_bf16_gemm_path(bf16_gemm_path_name(p), every_path), p);
  EXPECT_EQ(choose_bf16_gemm_path("portable", plain_cpu), Bf16GemmPath::Portable);
  EXPECT_EQ(choose_bf16_gemm_path("avx2", avx2_cpu), Bf16GemmPath::Avx2);
  // onednn runs on any CPU (oneDNN picks its own ISA); it is never the fastest-path default.
  EXPECT_EQ(choose_bf16_gemm_path("onednn", plain_cpu), Bf16GemmPath::OneDnn);
}

TEST(Bf16GemmPath, ABadValueIsAnInputErrorNamingIt) {
  for (const char* bad : {"avx512_bf16", "AVX2", "amx", "avx2 ", "oneDNN", "dnnl"}) {
    const std::string msg = choice_error(bad, every_path);
    EXPECT_NE(msg.find(std::string("OLMO2_BF16_GEMM=") + bad + ":"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected avx512bf16, avx2, portable or onednn"), std::string::npos) << msg;
  }
}

TEST(Bf16GemmPath, APathTheCpuLacksIsRefused) {
  EXPECT_EQ(choice_error("avx512bf16", avx2_cpu),
            "OLMO2_BF16_GEMM=avx512bf16: this CPU lacks the avx512bf16 path");
  EXPECT_EQ(choice_error("avx2", plain_cpu), "OLMO2_BF16_GEMM=avx2: this CPU lacks the avx2 path");
  // On this CPU: every path it lacks is refused by the override and by the kernel lookup.
  for (Bf16GemmPath p : kAll) {
    if (bf16_gemm_path_available(p)) continue;
    EXPECT_THROW(set_bf16_gemm_path(p), ShapeError) << bf16_gemm_path_name(p);
    EXPECT_THROW(detail::bf16_kernel(p), ShapeError) << bf16_gemm_path_name(p);
  }
}

TEST(Bf16GemmPath, OverrideAndReset) {
  const Bf16GemmPath before = choose_bf16_gemm_path(nullptr, bf16_gemm_path_available);
  set_bf16_gemm_path(Bf16GemmPath::Portable);
  EXPECT_EQ(bf16_gemm_path(), Bf16GemmPath::Portable);
  EXPECT_STREQ(bf16_gemm_path_name(), "portable");
  reset_bf16_gemm_path();
  if (std::getenv("OLMO2_BF16_GEMM") == nullptr) {
    EXPECT_EQ(bf16_gemm_path(), before);
  }
}

// Run by ctest with OLMO2_BF16_GEMM set to a bad value (tests/ops/CMakeLists.txt); skipped
// without it. Every bf16 product refuses, naming the value, until a path is forced.
TEST(Bf16GemmPathEnvironment, ABadValueStopsEveryBf16Product) {
  const char* env = std::getenv("OLMO2_BF16_GEMM");
  if (env == nullptr || choice_error(env, bf16_gemm_path_available).empty())
    GTEST_SKIP() << "OLMO2_BF16_GEMM is unset or valid";
  const std::string named = std::string("OLMO2_BF16_GEMM=") + env;
  for (int attempt = 0; attempt < 2; ++attempt) {  // the same error every time, not once
    try {
      bf16_gemm_path();
      ADD_FAILURE() << "no InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  }
  const Tensor x = test::random_tensor({2, 40}, 1), w = test::random_bf16({3, 40}, 2);
  Tensor y = Tensor::zeros({2, 3});
  EXPECT_THROW(linear(x.view(), w.view(), y.view()), InputError);
  set_bf16_gemm_path(Bf16GemmPath::Portable);
  EXPECT_NO_THROW(linear(x.view(), w.view(), y.view()));
  reset_bf16_gemm_path();
  EXPECT_THROW(linear(x.view(), w.view(), y.view()), InputError);
}

}  // namespace
}  // namespace olmo2::ops
