// How the CPU kernels with several code paths (the bf16 products, the batch-invariant
// f32 product) pick one: cpuid read once, an environment variable read once, a test
// override (docs/architecture.md §2). One mechanism for every such kernel.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"

namespace olmo2::ops::detail {

/// cpuid: AVX2 and FMA (read once).
inline bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

/// cpuid: AVX-512 F, BW, DQ and VL (read once).
inline bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return has;
}

/// The path the environment value `env` of variable `var` selects among `paths`
/// (fastest first) on a CPU that has the paths `available` says: with `env` null or
/// empty the fastest available one, else the one whose `name` it is. InputError naming
/// the value when it names no path or one the CPU lacks.
template <class Path, std::size_t N>
Path choose_code_path(const char* var, const char* env, const std::array<Path, N>& paths,
                      const char* (*name)(Path), bool (*available)(Path)) {
  if (env == nullptr || *env == '\0') {
    for (Path p : paths)
      if (available(p)) return p;
    return paths.back();
  }
  std::string expected;
  for (Path p : paths) {
    expected += (expected.empty() ? "" : p == paths.back() ? " or " : ", ") + std::string(name(p));
    if (std::string(env) != name(p)) continue;
    if (!available(p)) OLMO2_THROW(InputError, var, "=", env, ": this CPU lacks the ", env, " path");
    return p;
  }
  OLMO2_THROW(InputError, var, "=", env, ": expected ", expected);
}

/// One kernel's current path: the one forced by a test (force), else the one the
/// environment variable names or the fastest available (choose_code_path, resolved
/// once; a bad value throws its InputError at every call, so no call goes on with a
/// path nobody asked for).
template <class Path, std::size_t N>
class CodePathChoice {
 public:
  CodePathChoice(const char* var, std::array<Path, N> paths, const char* (*name)(Path), bool (*available)(Path))
      : var_(var), paths_(paths), name_(name), available_(available) {}

  Path current() const {
    const int forced = forced_.load(std::memory_order_relaxed);
    if (forced >= 0) return paths_[static_cast<std::size_t>(forced)];
    const Default& d = resolved();
    if (!d.error.empty()) OLMO2_THROW(InputError, d.error);
    return d.path;
  }

  /// Whether current() is a path somebody named (force, or the environment variable set
  /// and valid) rather than the fastest available one. Throws as current() does.
  bool named() const {
    if (forced_.load(std::memory_order_relaxed) >= 0) return true;
    const Default& d = resolved();
    if (!d.error.empty()) OLMO2_THROW(InputError, d.error);
    return d.named;
  }

  /// Forces `path` process-wide; ShapeError (naming `who`) when this CPU lacks it.
  void force(Path path, const char* who) {
    OLMO2_CHECK(available_(path), who, ": this CPU lacks the ", name_(path), " path");
    for (std::size_t i = 0; i < N; ++i)
      if (paths_[i] == path) forced_.store(static_cast<int>(i), std::memory_order_relaxed);
  }

  void reset() { forced_.store(-1, std::memory_order_relaxed); }

 private:
  struct Default {
    Path path{};
    bool named = false;
    std::string error;
  };
  const Default& resolved() const {
    std::call_once(once_, [this] {
      try {
        const char* env = std::getenv(var_);
        default_.path = choose_code_path(var_, env, paths_, name_, available_);
        default_.named = env != nullptr && *env != '\0';
      } catch (const InputError& e) {
        default_.error = e.what();
      }
    });
    return default_;
  }

  const char* var_;
  std::array<Path, N> paths_;
  const char* (*name_)(Path);
  bool (*available_)(Path);
  std::atomic<int> forced_{-1};
  mutable std::once_flag once_;
  mutable Default default_;
};

}  // namespace olmo2::ops::detail
