// Which handler answers a method and path: exact routes, then prefix routes (longest
// prefix first); a path some route knows under another method is a 405 with Allow.
#pragma once

#include <string>
#include <vector>

#include "runtime/serve/http/http_types.h"

namespace olmo2::http {

class Router {
 public:
  /// Adds METHOD PATH. Throws std::invalid_argument for an empty method or a path not
  /// starting with '/', or a route already added.
  void add(const std::string& method, const std::string& path, Handler handler);
  /// Adds METHOD PREFIX…: every path that starts with `prefix` and is longer than it.
  void add_prefix(const std::string& method, const std::string& prefix, Handler handler);

  struct Match {
    const Handler* handler = nullptr;  ///< null: no route for this method and path
    std::string path_suffix;           ///< after the prefix of a prefix route
    std::string allow;                 ///< handler null: the methods the path has ("" = unknown path → 404)
  };
  /// The route of `method` and `path` (methods compare exactly, as RFC 9110 §9.1 says).
  Match find(const std::string& method, const std::string& path) const;

 private:
  struct Route {
    std::string method, path;
    bool prefix = false;
    Handler handler;
  };
  std::vector<Route> routes_;
};

}  // namespace olmo2::http
