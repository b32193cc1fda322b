// One client connection of the HTTP front (internal to runtime/serve/http/): reads
// requests asynchronously on the I/O threads within the limits and deadlines of
// ServerOptions, hands each complete request to a worker, writes the responses in order
// (docs/architecture.md §8, "HTTP front"). Boost.Asio and Boost.Beast live here only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "runtime/serve/http/http_types.h"
#include "runtime/serve/http/response_writer.h"
#include "runtime/serve/http/router.h"
#include "runtime/serve/http/worker_pool.h"

namespace olmo2::http {

class Connection;

/// What the listener and its connections share. Routes, guard and formatter are fixed
/// before the first connection; the counters are guarded by `mutex`.
struct ServerCore {
  ServerOptions options;
  Router router;
  Guard guard;
  RefusalFormatter formatter;
  std::unique_ptr<WorkerPool> pool;
  std::atomic<bool> stopping{false};

  std::mutex mutex;
  std::condition_variable changed;  ///< a handler or a connection ended
  int64_t handlers = 0;             ///< queued or running
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;

  /// The refusal's body through `formatter` (plain text without one).
  std::pair<std::string, std::string> format(const Refusal& refusal, const Request& request) const;
  void handler_done();
};

class Connection : public ResponseChannel, public std::enable_shared_from_this<Connection> {
 public:
  using tcp = boost::asio::ip::tcp;
  /// `socket` accepted on a strand of its own; registers with `core`.
  Connection(tcp::socket socket, ServerCore& core);
  ~Connection() override;
  /// Starts reading the first request.
  void start();
  /// The server stops: a connection between requests closes now, one with a response
  /// in progress after it.
  void stop();

  bool queue(std::string bytes, bool wait) override;
  bool client_gone() const override { return gone_.load() || dead_.load(); }
  void on_client_gone(std::function<void()> wake) override;
  bool keep_alive() const override;
  void finished(bool reusable) override;

 private:
  enum class Phase { header, body, handler, lingering, closed };
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

  void read_request();
  void read_more();
  void on_read(boost::system::error_code ec, size_t n);
  void parse();
  std::optional<Refusal> scan_header_lines();
  bool on_header();
  void dispatch();
  void run_handler(const Handler& handler, const Request& request);
  void refuse(const Refusal& refusal, bool close);
  void on_timeout();
  void arm_read_deadline(double seconds);
  void watch_client(uint64_t generation);
  /// After the client's FIN during a handler: an interim "100 Continue" (HTTP/1.1, before
  /// any of the answer) and, 300 ms later, a look for the reset a closed socket answers it
  /// with — then the client is gone (its request is cancelled); else it half-closed and
  /// gets its answer.
  void probe_half_close(uint64_t generation);
  void write_next();
  void on_finished(bool reusable);
  void after_response();
  void linger();
  void drain();
  void close();
  void mark_dead();
  void mark_gone();      // the client hung up: gone_, and the handler's wake-up
  void fire_on_gone();   // calls and drops on_gone_
  void drop_on_gone();   // the handler returned: its wake-up is not wanted any more

  ServerCore& core_;
  tcp::socket socket_;
  boost::asio::any_io_executor strand_;  // socket_'s; copied so that workers never touch socket_
  boost::asio::steady_timer read_timer_, write_timer_, probe_timer_;
  boost::beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  Request request_;
  const Handler* handler_ = nullptr;

  // On the strand only.
  Phase phase_ = Phase::header;
  uint64_t generation_ = 0;     // requests begun on this connection
  bool got_bytes_ = false;      // of the current request
  bool deadline_passed_ = false;
  size_t scan_ = 0, line_start_ = 0, lines_ = 0;
  bool header_end_seen_ = false;
  size_t header_consumed_ = 0;  // header bytes the parser has taken so far (it may take them field by field)
  bool writing_ = false, response_done_ = false, reusable_ = true;
  bool http11_ = true;          // the current request's version is HTTP/1.1 (interim responses allowed)
  std::deque<std::string> pending_;
  std::string current_;
  std::vector<char> drain_buffer_;
  int64_t drained_ = 0;

  // Shared with the worker thread.
  std::atomic<bool> close_after_{false}, request_keep_alive_{true}, gone_{false}, dead_{false};
  std::mutex write_mutex_;
  std::mutex gone_mutex_;             // guards on_gone_; held while it runs
  std::function<void()> on_gone_;     // the running handler's wake-up (on_client_gone)
  std::condition_variable written_cv_;
  uint64_t queued_ = 0, written_ = 0;  // under write_mutex_
  uint64_t response_base_ = 0;         // under write_mutex_: queued_ when the current request began
};

}  // namespace olmo2::http
