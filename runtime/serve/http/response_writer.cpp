#include "runtime/serve/http/response_writer.h"

#include <boost/beast/http/status.hpp>

#include <cstdio>
#include <stdexcept>

namespace olmo2::http {

namespace {
/// A header name or value as sent: CR, LF and NUL become spaces.
std::string clean(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c == '\r' || c == '\n' || c == '\0') c = ' ';
  }
  return out;
}
}  // namespace

std::string_view reason_phrase(int status) {
  namespace bhttp = boost::beast::http;
  const bhttp::status s = bhttp::int_to_status(static_cast<unsigned>(status));
  if (s == bhttp::status::unknown) return "Unknown";
  const auto r = bhttp::obsolete_reason(s);
  return std::string_view(r.data(), r.size());
}

ResponseWriter::~ResponseWriter() {
  if (state_ != State::done) abort();
}

std::string ResponseWriter::head(int status, std::string_view content_type, const Headers& extra,
                                 const std::string& framing) const {
  if (status < 100 || status > 599) throw std::logic_error("HTTP status out of 100…599: " + std::to_string(status));
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason_phrase(status)) + "\r\n";
  h += "Content-Type: " + clean(content_type) + "\r\n";
  for (const auto& [name, value] : extra.fields()) h += clean(name) + ": " + clean(value) + "\r\n";
  h += framing;
  if (!channel_->keep_alive()) h += "Connection: close\r\n";
  return h + "\r\n";
}

void ResponseWriter::send(int status, std::string_view content_type, std::string_view body, const Headers& extra) {
  if (state_ != State::fresh) throw std::logic_error("ResponseWriter::send after the response was begun");
  std::string bytes = head(status, content_type, extra, "Content-Length: " + std::to_string(body.size()) + "\r\n");
  bytes.append(body);
  state_ = State::done;
  channel_->queue(std::move(bytes), false);
  channel_->finished(true);
}

bool ResponseWriter::begin_stream(int status, std::string_view content_type, const Headers& extra) {
  if (state_ != State::fresh) throw std::logic_error("ResponseWriter::begin_stream after the response was begun");
  state_ = State::streaming;
  return channel_->queue(head(status, content_type, extra, "Transfer-Encoding: chunked\r\n"), true);
}

bool ResponseWriter::write(std::string_view chunk) {
  if (state_ != State::streaming) throw std::logic_error("ResponseWriter::write outside a stream");
  if (channel_->client_gone()) return false;
  if (chunk.empty()) return true;
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", chunk.size());
  std::string bytes = size;
  bytes.reserve(bytes.size() + chunk.size() + 2);
  bytes.append(chunk);
  bytes += "\r\n";
  return channel_->queue(std::move(bytes), true);
}

void ResponseWriter::end() {
  if (state_ != State::streaming) throw std::logic_error("ResponseWriter::end outside a stream");
  state_ = State::done;
  channel_->queue("0\r\n\r\n", false);
  channel_->finished(true);
}

void ResponseWriter::abort() {
  if (state_ == State::done) return;
  state_ = State::done;
  channel_->finished(false);
}

}  // namespace olmo2::http
