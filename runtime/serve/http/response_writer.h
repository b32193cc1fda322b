// How a handler answers: once (send) or as a chunked stream (begin_stream, write, end),
// from the worker thread that runs it (docs/architecture.md §8, "HTTP front").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/serve/http/http_types.h"

namespace olmo2::http {

/// The connection's side of one response (implemented by the transport). Thread-safe.
class ResponseChannel {
 public:
  virtual ~ResponseChannel() = default;
  /// Queues bytes for the client, in order. `wait`: returns once they are written.
  /// False when the client is gone (a failed or timed-out write, a hang-up).
  virtual bool queue(std::string bytes, bool wait) = 0;
  /// True once the client has hung up (seen while the handler runs, or a failed write).
  virtual bool client_gone() const = 0;
  /// `wake` is called once, from the transport's thread, when the client is gone (at
  /// once, on this thread, when it already is), so that a handler blocked on its own
  /// work can wait without polling client_gone(). Replaces an earlier callback; the
  /// transport drops it when the handler returns. `wake` must only notify (it runs with
  /// the transport's lock held).
  virtual void on_client_gone(std::function<void()> wake) = 0;
  /// Whether the connection may carry another request after this response.
  virtual bool keep_alive() const = 0;
  /// The response is complete (its bytes queued). `reusable`: false when it was cut
  /// short, so that the connection must close.
  virtual void finished(bool reusable) = 0;
};

/// A response under construction. Header values are sent with CR, LF and NUL replaced
/// by spaces (a request header echoed back cannot split the response). Not thread-safe.
class ResponseWriter {
 public:
  explicit ResponseWriter(std::shared_ptr<ResponseChannel> channel) : channel_(std::move(channel)) {}
  /// A response left unfinished is abandoned (abort()): the server answers a handler
  /// that sent nothing before the writer goes (a 500), so this is a last resort.
  ~ResponseWriter();
  ResponseWriter(const ResponseWriter&) = delete;
  ResponseWriter& operator=(const ResponseWriter&) = delete;

  /// The whole response: status (100…599), Content-Type, body, extra fields. Does not
  /// wait for the client. Throws std::logic_error after a response was begun.
  void send(int status, std::string_view content_type, std::string_view body, const Headers& extra = {});
  /// A chunked response's head; false when the client is already gone. Waits until written.
  bool begin_stream(int status, std::string_view content_type, const Headers& extra = {});
  /// One chunk of a stream (empty: nothing); waits until written. False when the client
  /// is gone: the handler should stop (and cancel its work).
  bool write(std::string_view chunk);
  /// The stream's last chunk.
  void end();
  /// Abandons a stream without its last chunk (the client sees a cut response) and
  /// closes the connection; for a handler that fails mid-stream.
  void abort();

  bool client_gone() const { return channel_->client_gone(); }
  /// See ResponseChannel::on_client_gone.
  void on_client_gone(std::function<void()> wake) { channel_->on_client_gone(std::move(wake)); }
  /// True once send() or begin_stream() was called.
  bool started() const { return state_ != State::fresh; }
  /// True once the response is complete (sent, ended or aborted).
  bool finished() const { return state_ == State::done; }

 private:
  enum class State { fresh, streaming, done };
  std::string head(int status, std::string_view content_type, const Headers& extra, const std::string& framing) const;
  std::shared_ptr<ResponseChannel> channel_;
  State state_ = State::fresh;
};

/// The reason phrase of an HTTP status ("Not Found"; "Unknown" for codes RFC 9110 does
/// not name).
std::string_view reason_phrase(int status);

}  // namespace olmo2::http
