// Helpers shared by the test suites.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <sys/wait.h>

#include <gtest/gtest.h>

#include "core/error.h"

namespace olmo2::test {

/// |a − b| for comparisons that must not lose a NaN or an infinity the reference does not
/// have at the same place (std::max(worst, NaN) keeps `worst`, and NaN ≤ bound is false
/// only at the check): 0 when both are the same non-finite value (NaN and NaN, or
/// infinities of one sign), +∞ when only one is non-finite or they are different
/// non-finite values, else |a − b|. Never NaN.
inline double abs_diff(double a, double b) {
  const bool fa = std::isfinite(a), fb = std::isfinite(b);
  if (fa && fb) return std::fabs(a - b);
  if (std::isnan(a) && std::isnan(b)) return 0.0;
  if (!fa && !fb && a == b) return 0.0;  // infinities of one sign
  return INFINITY;
}

/// Path of a file under the source tree, e.g. source_path("tests/golden/fixtures").
inline std::string source_path(const std::string& rel) { return std::string(OLMO2_SOURCE_DIR) + "/" + rel; }

/// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "olmo2-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Result of running the olmo2 binary.
struct RunResult {
  int status = -1;  ///< exit status
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// Runs `PROGRAM ARGS` (ARGS is shell-quoted by the caller) and captures its output.
inline RunResult run_olmo2_with(const std::string& program, const std::string& args) {
  TempDir dir;
  const std::string cmd = program + " " + args + " >" + dir.file("out") + " 2>" + dir.file("err");
  RunResult r;
  const int raw = std::system(cmd.c_str());
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128;
  auto slurp = [](const std::string& p) {
    std::string s;
    if (FILE* f = std::fopen(p.c_str(), "rb")) {
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
      std::fclose(f);
    }
    return s;
  };
  r.out = slurp(dir.file("out"));
  r.err = slurp(dir.file("err"));
  return r;
}

/// Runs the olmo2 binary with `args`.
inline RunResult run_olmo2(const std::string& args) { return run_olmo2_with(OLMO2_BINARY, args); }

/// Runs `f`, which must throw InputError, and returns its message ("" and a test
/// failure when it does not throw).
template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

}  // namespace olmo2::test
