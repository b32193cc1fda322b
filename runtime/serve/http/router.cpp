#include "runtime/serve/http/router.h"

#include <algorithm>
#include <stdexcept>

namespace olmo2::http {

namespace {
bool matches(const std::string& route, bool prefix, const std::string& path) {
  if (!prefix) return route == path;
  return path.size() > route.size() && path.compare(0, route.size(), route) == 0;
}
}  // namespace

void Router::add(const std::string& method, const std::string& path, Handler handler) {
  if (method.empty()) throw std::invalid_argument("an HTTP route needs a method");
  if (path.empty() || path[0] != '/') throw std::invalid_argument("an HTTP route's path must start with '/': " + path);
  for (const Route& r : routes_) {
    if (r.method == method && r.path == path && !r.prefix) throw std::invalid_argument("route added twice: " + method + " " + path);
  }
  routes_.push_back({method, path, false, std::move(handler)});
}

void Router::add_prefix(const std::string& method, const std::string& prefix, Handler handler) {
  add(method, prefix, std::move(handler));
  routes_.back().prefix = true;
}

Router::Match Router::find(const std::string& method, const std::string& path) const {
  Match m;
  const Route* best = nullptr;
  std::vector<std::string> allowed;
  for (const Route& r : routes_) {
    if (!matches(r.path, r.prefix, path)) continue;
    if (r.method == method) {
      // An exact route wins over any prefix; among prefixes the longest.
      if (!best || (best->prefix && (!r.prefix || r.path.size() > best->path.size()))) best = &r;
    } else if (std::find(allowed.begin(), allowed.end(), r.method) == allowed.end()) {
      allowed.push_back(r.method);
    }
  }
  if (best) {
    m.handler = &best->handler;
    if (best->prefix) m.path_suffix = path.substr(best->path.size());
    return m;
  }
  for (const std::string& a : allowed) m.allow += (m.allow.empty() ? "" : ", ") + a;
  return m;
}

}  // namespace olmo2::http
