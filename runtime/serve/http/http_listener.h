// The HTTP/1.1 server of the serving front: Boost.Asio accepts and reads on 1–2 I/O
// threads, a bounded pool of workers runs the handlers (docs/architecture.md §8, "HTTP
// front"). Idle and slow connections hold no worker: only a complete request within
// the limits of ServerOptions reaches one.
#pragma once

#include <memory>
#include <string>

#include "runtime/serve/http/http_types.h"
#include "runtime/serve/http/response_writer.h"

namespace olmo2::http {

class Server {
 public:
  /// Resolves options.host and binds options.port (SO_REUSEADDR, not SO_REUSEPORT: a
  /// second server cannot share the port), listening but not yet accepting. Throws
  /// InputError naming the address when it cannot, or for options out of range
  /// (workers < 1, io_threads not 1 or 2, a zero limit or deadline).
  explicit Server(const ServerOptions& options);
  /// stop().
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Adds a route (before start()). Methods compare exactly; paths are not decoded.
  void route(const std::string& method, const std::string& path, Handler handler);
  /// Adds a prefix route (before start()): paths longer than `prefix` starting with it;
  /// the handler finds the rest in Request::path_suffix.
  void route_prefix(const std::string& method, const std::string& prefix, Handler handler);
  /// The check run once a request's header is complete (before start()).
  void set_guard(Guard guard);
  /// The body of every refusal (before start()); plain text without one.
  void set_refusal_formatter(RefusalFormatter formatter);

  /// Starts the workers and the I/O threads: connections are accepted from here on.
  void start();
  /// Stops accepting, closes connections between requests, waits for every handler
  /// queued or running to return, then up to write_timeout_s + linger_s for their
  /// responses to reach the clients, and joins every thread. Idempotent; concurrent
  /// callers all return once it is done.
  void stop();

  /// "host:port" ("[v6]:port"), with the bound port.
  const std::string& address() const;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace olmo2::http
