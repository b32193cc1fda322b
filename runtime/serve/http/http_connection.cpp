#include "runtime/serve/http/http_connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <limits>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>

namespace olmo2::http {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

namespace {
constexpr size_t kReadChunk = 16 << 10;
std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

std::pair<std::string, std::string> ServerCore::format(const Refusal& refusal, const Request& request) const {
  if (formatter) return formatter(refusal, request);
  return {"text/plain; charset=utf-8", refusal.message + "\n"};
}

void ServerCore::handler_done() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    --handlers;
  }
  changed.notify_all();
}

Connection::Connection(tcp::socket socket, ServerCore& core)
    : core_(core),
      socket_(std::move(socket)),
      strand_(socket_.get_executor()),
      read_timer_(strand_),
      write_timer_(strand_),
      probe_timer_(strand_) {}

Connection::~Connection() {
  {
    std::lock_guard<std::mutex> lock(core_.mutex);
    core_.connections.erase(this);
  }
  core_.changed.notify_all();
}

void Connection::start() {
  {
    std::lock_guard<std::mutex> lock(core_.mutex);
    core_.connections[this] = weak_from_this();
  }
  net::post(strand_, [self = shared_from_this()] { self->read_request(); });
}

void Connection::stop() {
  net::post(strand_, [self = shared_from_this()] {
    // Between requests, or inside one not yet complete (it was never in flight): close.
    if (self->phase_ == Phase::header || self->phase_ == Phase::body) self->close();
  });
}

bool Connection::keep_alive() const {
  return request_keep_alive_.load() && !close_after_.load() && !core_.stopping.load();
}

// ---- reading a request -------------------------------------------------------------

void Connection::read_request() {
  if (phase_ == Phase::closed) return;
  phase_ = Phase::header;
  ++generation_;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(core_.options.max_header_bytes));
  // The length is checked in on_header, then the limit set for chunked bodies. (Not
  // boost::none: Beast 1.74 compares a Content-Length with an empty limit as over it.)
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  parser_->eager(false);             // stop at the header's end: nothing of the body before the checks
  request_ = Request{};
  handler_ = nullptr;
  // A connection that once read a large header gives the memory back between requests.
  if (buffer_.size() == 0 && buffer_.capacity() > kReadChunk) buffer_.shrink_to_fit();
  got_bytes_ = buffer_.size() > 0;
  scan_ = line_start_ = lines_ = 0;
  header_end_seen_ = false;
  header_consumed_ = 0;
  close_after_ = false;
  request_keep_alive_ = true;
  gone_ = false;
  arm_read_deadline(core_.options.header_timeout_s);
  parse();
}

void Connection::arm_read_deadline(double s) {
  deadline_passed_ = false;
  read_timer_.expires_after(seconds(s));
  read_timer_.async_wait([self = shared_from_this(), gen = generation_, phase = phase_](error_code ec) {
    if (ec || self->phase_ != phase || self->generation_ != gen) return;
    if (phase == Phase::lingering) return self->close();
    if (phase != Phase::header && phase != Phase::body) return;
    // The read in progress ends with operation_aborted; on_read then acts.
    self->deadline_passed_ = true;
    error_code ignored;
    self->socket_.cancel(ignored);
  });
}

void Connection::read_more() {
  // Room for the header limit and one read: a header never needs more, and in the body
  // the parser consumes what it is given (a chunk-size line is the only thing it keeps).
  const size_t cap = core_.options.max_header_bytes + kReadChunk;
  if (buffer_.size() >= cap) {
    return refuse({400, "a chunk-size line or trailer of the request is too long", "", {}}, true);
  }
  socket_.async_read_some(buffer_.prepare(std::min(kReadChunk, cap - buffer_.size())),
                          [self = shared_from_this()](error_code ec, size_t n) { self->on_read(ec, n); });
}

void Connection::on_read(error_code ec, size_t n) {
  if (phase_ != Phase::header && phase_ != Phase::body) return;
  if (ec == net::error::operation_aborted && deadline_passed_) return on_timeout();
  if (ec) return close();  // the client hung up (or reset) mid-request or between requests
  buffer_.commit(n);
  got_bytes_ = true;
  parse();
}

void Connection::on_timeout() {
  if (phase_ == Phase::header && !got_bytes_) return close();  // an idle keep-alive connection
  refuse({408, phase_ == Phase::header ? "the request header did not arrive in time"
                                       : "the request body did not arrive in time",
          "", {}},
         true);
}

std::optional<Refusal> Connection::scan_header_lines() {
  const char* data = static_cast<const char*>(buffer_.data().data());
  const size_t size = buffer_.size();
  const ServerOptions& o = core_.options;
  for (; !header_end_seen_ && scan_ < size; ++scan_) {
    if (data[scan_] != '\n') continue;
    const size_t len = scan_ - line_start_;
    if (lines_ == 0 && len > o.max_request_line) break;
    if (lines_ > 0 && len > o.max_field_line) break;
    header_end_seen_ = lines_ > 0 && (len == 0 || (len == 1 && data[line_start_] == '\r'));
    ++lines_;
    line_start_ = scan_ + 1;
  }
  if (header_end_seen_) return std::nullopt;
  const size_t open = scan_ - line_start_;  // the line being read (or the one that broke the loop)
  if (lines_ == 0 && open > o.max_request_line) {
    return Refusal{414, "the request line is longer than " + std::to_string(o.max_request_line) + " bytes", "", {}};
  }
  if (lines_ > 0 && open > o.max_field_line) {
    return Refusal{431, "a header field is longer than " + std::to_string(o.max_field_line) + " bytes", "", {}};
  }
  return std::nullopt;
}

void Connection::parse() {
  const ServerOptions& o = core_.options;
  for (;;) {
    if (phase_ == Phase::header) {
      if (auto r = scan_header_lines()) return refuse(*r, true);
      if (buffer_.size() == 0) return read_more();
      error_code ec;
      const size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (used > 0) scan_ = line_start_ = 0, header_end_seen_ = true;  // the header is consumed whole
      // The header as a whole, counted here: the parser's own header_limit let a header of
      // short fields through up to what one buffer holds (75 KB got 200, measured).
      header_consumed_ += used;
      if (header_consumed_ > o.max_header_bytes ||
          (!parser_->is_header_done() && header_consumed_ + buffer_.size() > o.max_header_bytes)) {
        ec = bhttp::error::header_limit;
      }
      if (ec == bhttp::error::need_more) return read_more();
      if (ec == bhttp::error::header_limit) {
        return refuse({431, "the request header is longer than " + std::to_string(o.max_header_bytes) + " bytes", "",
                       {}},
                      true);
      }
      if (ec) return refuse({400, "malformed request: " + ec.message(), "", {}}, true);
      if (!parser_->is_header_done()) return read_more();
      if (!on_header()) return;
      phase_ = Phase::body;
      arm_read_deadline(o.body_timeout_s);
      continue;
    }
    if (phase_ != Phase::body) return;
    if (parser_->is_done()) return dispatch();
    if (buffer_.size() == 0) return read_more();
    error_code ec;
    const size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == bhttp::error::need_more) return read_more();
    if (ec == bhttp::error::body_limit) {
      return refuse({413, "the request body is over the limit of " + std::to_string(o.max_body_bytes) +
                              " bytes (--max-body-bytes)",
                     "body", {}},
                    true);
    }
    if (ec) return refuse({400, "malformed request body: " + ec.message(), "", {}}, true);
  }
}

bool Connection::on_header() {
  const auto& msg = parser_->get();
  request_.method = std::string(msg.method_string());
  const std::string target(msg.target());
  const size_t q = target.find('?');
  request_.path = target.substr(0, q);
  if (q != std::string::npos) request_.query = target.substr(q + 1);
  for (const auto& f : msg) request_.headers.add(std::string(f.name_string()), std::string(f.value()));
  request_keep_alive_ = parser_->keep_alive();
  http11_ = msg.version() >= 11;
  {
    std::lock_guard<std::mutex> lock(write_mutex_);
    response_base_ = queued_;
  }
  // A body the parser cannot delimit (Transfer-Encoding not ending in chunked) would be
  // read as the next request: refused. (Content-Length with chunked the parser refuses.)
  if (request_.headers.has("Transfer-Encoding") && !parser_->chunked()) {
    refuse({400, "Transfer-Encoding other than chunked is not supported", "", {}}, true);
    return false;
  }
  // Answers given before the body is read close the connection when a body follows.
  const bool body_follows = !parser_->is_done();
  if (core_.guard) {
    if (std::optional<Refusal> r = core_.guard(request_)) {
      refuse(*r, body_follows);
      return false;
    }
  }
  const Router::Match m = core_.router.find(request_.method, request_.path);
  if (!m.handler) {
    if (m.allow.empty()) {
      refuse({404, "no such endpoint: " + request_.path, "", {}}, body_follows);
    } else {
      refuse({405, request_.method + " is not allowed on " + request_.path, "", {{"Allow", m.allow}}}, body_follows);
    }
    return false;
  }
  handler_ = m.handler;
  request_.path_suffix = m.path_suffix;
  const auto length = parser_->content_length();
  if (length && *length > static_cast<uint64_t>(core_.options.max_body_bytes)) {
    refuse({413, "the request body of " + std::to_string(*length) + " bytes is over the limit of " +
                     std::to_string(core_.options.max_body_bytes) + " bytes (--max-body-bytes)",
            "body", {}},
           true);
    return false;
  }
  parser_->body_limit(static_cast<uint64_t>(core_.options.max_body_bytes));
  parser_->eager(true);
  if (body_follows && iequals(request_.headers.get("Expect"), "100-continue")) {
    queue("HTTP/1.1 100 Continue\r\n\r\n", false);
  }
  return true;
}

// ---- handing the request over --------------------------------------------------------

void Connection::dispatch() {
  read_timer_.cancel();
  phase_ = Phase::handler;
  request_.body = std::move(parser_->get().body());
  {
    std::lock_guard<std::mutex> lock(core_.mutex);
    ++core_.handlers;
  }
  const Handler* h = handler_;
  const bool queued = core_.pool->try_post(
      [self = shared_from_this(), h, req = std::move(request_)] { self->run_handler(*h, req); });
  if (!queued) {
    core_.handler_done();
    return refuse({503, "the server is busy: every HTTP worker is taken and " + std::to_string(core_.options.max_queued) +
                            " requests wait for one; retry later",
                   "", {}},
                  false);
  }
  watch_client(generation_);
}

void Connection::run_handler(const Handler& handler, const Request& request) {
  {
    ResponseWriter w(shared_from_this());
    auto fail = [&](const std::string& message) {
      if (w.started()) return w.abort();  // mid-stream: the client sees a cut response
      const auto [type, body] = core_.format(Refusal{500, message, "", {}}, request);
      w.send(500, type, body);
    };
    try {
      handler(request, w);
      if (!w.started()) fail("internal server error: the handler of " + request.path + " sent no response");
      else if (!w.finished()) w.end();
    } catch (const std::exception& e) {
      fail(std::string("internal server error: ") + e.what());
    } catch (...) {
      fail("internal server error");
    }
  }
  drop_on_gone();
  core_.handler_done();
}

void Connection::watch_client(uint64_t gen) {
  // Bytes already here are a pipelined request: the client is there.
  if (buffer_.size() > 0) return;
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen](error_code ec) {
    if (ec || self->phase_ != Phase::handler || self->generation_ != gen) return;
    char c;
    const ssize_t r = ::recv(self->socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r > 0) return;  // a pipelined request: the client is there
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return self->watch_client(gen);
    if (r == 0) {
      // End of stream: the client shut down its sending side (FIN). It may still read
      // the answer (`nc -N` and some HTTP/1.0 clients half-close after the request), so
      // the request goes on and the connection closes after it; probe_half_close tells
      // a client that closed for good (and should have its request cancelled) from one
      // that waits.
      self->close_after_ = true;
      self->probe_half_close(gen);
      return;
    }
    self->mark_gone();  // a reset: nobody will read the answer
  });
}

void Connection::probe_half_close(uint64_t gen) {
  // HTTP/1.1 clients must accept an interim 1xx response before the final one (RFC 9110,
  // "Informational 1xx"); HTTP/1.0 ones must not be sent one, and simply get the answer.
  if (!http11_) return;
  {
    std::lock_guard<std::mutex> lock(write_mutex_);
    if (dead_ || queued_ != response_base_) return;  // the answer has begun: its own writes tell
    ++queued_;
    net::post(strand_, [self = shared_from_this()] {
      self->pending_.push_back("HTTP/1.1 100 Continue\r\n\r\n");
      if (!self->writing_) self->write_next();
    });
  }
  // A socket closed for good answers new data with a reset; a half-closed one takes it.
  probe_timer_.expires_after(std::chrono::milliseconds(300));
  probe_timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
    if (ec || self->phase_ != Phase::handler || self->generation_ != gen) return;
    // (recv would still say end of stream: Linux reports the FIN before the reset's
    // error, so the socket's state is what tells.)
    tcp_info info{};
    socklen_t n = sizeof info;
    int err = 0;
    socklen_t en = sizeof err;
    const int fd = self->socket_.native_handle();
    const bool reset = (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &n) == 0 && info.tcpi_state == TCP_CLOSE) ||
                       (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &en) == 0 && err != 0);
    if (reset) {
      self->mark_gone();  // nobody will read the answer
    }
  });
}

void Connection::refuse(const Refusal& refusal, bool close) {
  read_timer_.cancel();
  phase_ = Phase::handler;  // a response is in progress, as for a handler
  if (close) close_after_ = true;
  const auto [type, body] = core_.format(refusal, request_);
  ResponseWriter w(shared_from_this());
  w.send(refusal.status, type, body, refusal.headers);
}

// ---- writing -------------------------------------------------------------------------

bool Connection::queue(std::string bytes, bool wait) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(write_mutex_);
    if (dead_) return false;
    seq = ++queued_;
  }
  net::post(strand_, [self = shared_from_this(), b = std::move(bytes)]() mutable {
    self->pending_.push_back(std::move(b));
    if (!self->writing_) self->write_next();
  });
  if (!wait) return true;
  std::unique_lock<std::mutex> lock(write_mutex_);
  written_cv_.wait(lock, [&] { return written_ >= seq || dead_; });
  return written_ >= seq && !gone_;
}

void Connection::write_next() {
  if (phase_ == Phase::closed) return;
  if (pending_.empty()) {
    writing_ = false;
    if (response_done_) after_response();
    return;
  }
  writing_ = true;
  current_ = std::move(pending_.front());
  pending_.pop_front();
  write_timer_.expires_after(seconds(core_.options.write_timeout_s));
  write_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec) self->close();  // the client stopped reading
  });
  net::async_write(socket_, net::buffer(current_), [self = shared_from_this()](error_code ec, size_t) {
    self->write_timer_.cancel();
    if (ec) return self->close();
    {
      std::lock_guard<std::mutex> lock(self->write_mutex_);
      ++self->written_;
    }
    self->written_cv_.notify_all();
    self->write_next();
  });
}

void Connection::finished(bool reusable) {
  net::post(strand_, [self = shared_from_this(), reusable] { self->on_finished(reusable); });
}

void Connection::on_finished(bool reusable) {
  if (phase_ == Phase::closed) return;
  response_done_ = true;
  reusable_ = reusable;
  if (!writing_ && pending_.empty()) after_response();
}

void Connection::after_response() {
  response_done_ = false;
  if (phase_ == Phase::closed) return;
  if (!reusable_ || !keep_alive() || gone_) return linger();
  reusable_ = true;
  read_request();  // bytes of a pipelined request may be in buffer_ already
}

// ---- closing -------------------------------------------------------------------------

void Connection::linger() {
  // Half-close, then read and discard what the client still sends for a bounded time:
  // closing with unread bytes would reset the connection, and the client could lose
  // the response it has not read yet.
  phase_ = Phase::lingering;
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  drained_ = static_cast<int64_t>(buffer_.size());
  buffer_.consume(buffer_.size());
  drain_buffer_.resize(kReadChunk);
  arm_read_deadline(core_.options.linger_s);
  drain();
}

void Connection::drain() {
  socket_.async_read_some(net::buffer(drain_buffer_), [self = shared_from_this()](error_code ec, size_t n) {
    if (self->phase_ != Phase::lingering) return;
    self->drained_ += static_cast<int64_t>(n);
    if (ec || self->drained_ > self->core_.options.linger_bytes) return self->close();
    self->drain();
  });
}

void Connection::mark_dead() {
  {
    std::lock_guard<std::mutex> lock(write_mutex_);
    dead_ = true;
  }
  written_cv_.notify_all();
  fire_on_gone();
}

void Connection::mark_gone() {
  gone_ = true;
  written_cv_.notify_all();
  fire_on_gone();
}

void Connection::fire_on_gone() {
  std::lock_guard<std::mutex> lock(gone_mutex_);
  if (on_gone_) std::exchange(on_gone_, nullptr)();
}

void Connection::drop_on_gone() {
  std::lock_guard<std::mutex> lock(gone_mutex_);
  on_gone_ = nullptr;
}

void Connection::on_client_gone(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(gone_mutex_);
  if (client_gone()) {
    if (wake) wake();
    on_gone_ = nullptr;
    return;
  }
  on_gone_ = std::move(wake);
}

void Connection::close() {
  if (phase_ == Phase::closed) return;
  phase_ = Phase::closed;
  mark_dead();
  pending_.clear();
  error_code ec;
  read_timer_.cancel();
  write_timer_.cancel();
  socket_.close(ec);
}

}  // namespace olmo2::http
