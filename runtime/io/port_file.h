// The port file of `olmo2 serve --port-file` and `olmo2 train --port-file`: where a
// server that bound a port the kernel chose (--port 0, --metrics-port 0) tells scripts
// and tests which one, instead of their picking a free port in advance and racing other
// processes for it (docs/architecture.md §12).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace olmo2 {

/// Checks, before any work, that `path` can be written: its folder exists and is
/// writable, and it is not a folder itself. Throws InputError naming the path and why.
void check_port_file(const std::string& path);

/// The address to publish for a server listening on `host`:`port`: host itself, or this
/// machine's host name where host is a wildcard ("0.0.0.0", "::", "") that no client can
/// connect to. IPv6 literals in brackets: "[::1]:8000".
std::string published_address(const std::string& host, int port);

/// Writes `lines` (one "HOST:PORT" each) to `path` atomically: into a temporary file
/// beside it, then renamed over it, so a reader polling for the file never sees part of
/// it. Throws InputError naming the path when it cannot.
void write_port_file(const std::string& path, const std::vector<std::string>& lines);

/// Removes the port file at `path` when destroyed (empty: nothing), so that no later
/// script reads a port nobody listens on any more.
class PortFileGuard {
 public:
  explicit PortFileGuard(std::string path = "") : path_(std::move(path)) {}
  ~PortFileGuard();
  PortFileGuard(const PortFileGuard&) = delete;
  PortFileGuard& operator=(const PortFileGuard&) = delete;
  void reset(std::string path) { path_ = std::move(path); }

 private:
  std::string path_;
};

}  // namespace olmo2
