// Typed exceptions shared by every layer: what went wrong and where (file:line).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace olmo2 {

/// Base of every error the library throws. `what()` is one readable line that names
/// the offending value; `where()` is the source location that raised it.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line)
      : std::runtime_error(message), where_(std::string(file) + ":" + std::to_string(line)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

/// Bad user input: a file, a configuration value, a command-line option.
class InputError : public Error {
 public:
  using Error::Error;
};

/// A call that violates an op's contract (shapes, dtypes, devices): a bug in the caller.
class ShapeError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace olmo2

/// Throw `Type` with a message built from the stream-able arguments.
#define OLMO2_THROW(Type, ...) throw Type(::olmo2::detail::concat(__VA_ARGS__), __FILE__, __LINE__)

/// Check an op's contract; throws ShapeError naming the failed condition.
#define OLMO2_CHECK(cond, ...)                                                      \
  do {                                                                              \
    if (!(cond)) OLMO2_THROW(::olmo2::ShapeError, "check failed: " #cond ": ", __VA_ARGS__); \
  } while (0)
