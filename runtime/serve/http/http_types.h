// The small, transport-neutral face of the HTTP layer (docs/architecture.md §8, "HTTP
// front"): a request as a handler sees it, the limits and deadlines of the server, and
// the hooks the API installs. Nothing here includes Boost.Asio or Boost.Beast.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace olmo2::http {

/// Header fields in arrival order; names compare case-insensitively (RFC 9110 §5.1).
class Headers {
 public:
  Headers() = default;
  Headers(std::initializer_list<std::pair<std::string, std::string>> fields) : fields_(fields) {}
  void add(std::string name, std::string value) { fields_.emplace_back(std::move(name), std::move(value)); }
  /// The first field named `name` (any case), or null.
  const std::string* find(std::string_view name) const;
  /// find()'s value, or "" when absent.
  std::string get(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

/// ASCII case-insensitive equality (header names, the Bearer scheme).
bool iequals(std::string_view a, std::string_view b);

/// One complete request, as handed to a handler (or, body still empty, to a Guard).
struct Request {
  std::string method;  ///< as sent ("GET", "POST", …)
  std::string path;    ///< the target up to '?', not percent-decoded
  std::string query;   ///< after '?' ("" when none)
  Headers headers;
  std::string body;    ///< whole, at most ServerOptions::max_body_bytes
  /// For a prefix route: the part of `path` after the prefix ("" for an exact route).
  std::string path_suffix;
};

/// An answer the transport or a Guard gives instead of a handler: status, a readable
/// message, the offending part of the request ("body" for 413, "" when none) and extra
/// header fields (Allow for 405).
struct Refusal {
  int status = 400;
  std::string message;
  std::string param;
  Headers headers;
};

/// Limits and deadlines of a Server. Bytes are bytes; times are seconds.
struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                    ///< 0: any free port (Server::port() tells)
  int workers = 64;                   ///< handler threads; a handler may block
  int max_queued = 1024;              ///< complete requests waiting for a worker; more get 503
  int io_threads = 1;                 ///< threads reading and writing sockets (1 or 2)
  int backlog = 1024;                 ///< listen() backlog
  size_t max_request_line = 8 << 10;  ///< longer: 414
  size_t max_field_line = 8 << 10;    ///< one header line longer: 431
  size_t max_header_bytes = 64 << 10; ///< request line + header block longer: 431
  int64_t max_body_bytes = 1 << 20;   ///< longer (Content-Length or chunked): 413, then close
  double header_timeout_s = 10;       ///< from waiting for a request to its header's end
  double body_timeout_s = 30;         ///< from the header's end to the body's end
  double write_timeout_s = 30;        ///< one write to the client; past it the connection closes
  double linger_s = 2;                ///< closing: unread bytes are discarded this long at most
  int64_t linger_bytes = 1 << 20;     ///< … and at most this many
};

/// The response to one request. A handler calls send() once, or begin_stream(), any
/// number of write() and end(). Usable from any one thread at a time (the worker that
/// runs the handler); nothing after the response is complete.
class ResponseWriter;

using Handler = std::function<void(const Request&, ResponseWriter&)>;
/// Runs on the I/O thread when a request's header is complete, before its body is
/// read (it sees an empty body): a Refusal answers the request and closes the
/// connection (no unread body is ever taken for a request). Must not block.
using Guard = std::function<std::optional<Refusal>(const Request&)>;
/// Formats a Refusal as a response body: (content type, body). `request` holds what
/// was read of the request (method and path empty when the request line was not
/// complete). May count the refusal. Must not block.
using RefusalFormatter = std::function<std::pair<std::string, std::string>(const Refusal&, const Request& request)>;

}  // namespace olmo2::http
