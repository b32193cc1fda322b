#include "parallel/timed_communicator.h"

#include <chrono>

#include "core/error.h"

namespace olmo2::parallel {

const char* to_string(CommOp op) {
  static constexpr const char* kNames[kCommOpCount] = {
      "all_reduce_sum", "all_reduce_max", "all_gather", "reduce_scatter_sum", "broadcast",
      "barrier",        "send",           "recv",       "send_recv"};
  const int i = static_cast<int>(op);
  return i >= 0 && i < kCommOpCount ? kNames[i] : "unknown";
}

TimedCommunicator::TimedCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)) {
  if (!inner_) OLMO2_THROW(Error, "TimedCommunicator: null communicator");
}

template <typename Fn>
void TimedCommunicator::timed(CommOp op, uint64_t bytes, Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  struct Account {  // adds the time on return and on throw alike
    CommOpStats& s;
    Clock::time_point t0;
    ~Account() { s.seconds += std::chrono::duration<double>(Clock::now() - t0).count(); }
  };
  CommOpStats& s = stats_[static_cast<int>(op)];
  ++s.calls;
  s.bytes += bytes;
  Account account{s, Clock::now()};
  fn();
}

double TimedCommunicator::total_seconds() const {
  double t = 0;
  for (const CommOpStats& s : stats_) t += s.seconds;
  return t;
}

uint64_t TimedCommunicator::total_bytes() const {
  uint64_t b = 0;
  for (const CommOpStats& s : stats_) b += s.bytes;
  return b;
}

uint64_t TimedCommunicator::total_calls() const {
  uint64_t n = 0;
  for (const CommOpStats& s : stats_) n += s.calls;
  return n;
}

void TimedCommunicator::reset() { stats_.fill(CommOpStats{}); }

void TimedCommunicator::all_reduce_sum(std::span<float> data) {
  timed(CommOp::all_reduce_sum, data.size_bytes(), [&] { inner_->all_reduce_sum(data); });
}

void TimedCommunicator::all_reduce_max(std::span<float> data) {
  timed(CommOp::all_reduce_max, data.size_bytes(), [&] { inner_->all_reduce_max(data); });
}

void TimedCommunicator::all_gather(std::span<const float> in, std::span<float> out) {
  timed(CommOp::all_gather, out.size_bytes(), [&] { inner_->all_gather(in, out); });
}

void TimedCommunicator::reduce_scatter_sum(std::span<const float> in, std::span<float> out) {
  timed(CommOp::reduce_scatter_sum, in.size_bytes(), [&] { inner_->reduce_scatter_sum(in, out); });
}

void TimedCommunicator::broadcast(std::span<float> data, int root) {
  timed(CommOp::broadcast, data.size_bytes(), [&] { inner_->broadcast(data, root); });
}

void TimedCommunicator::broadcast(std::span<std::byte> data, int root) {
  timed(CommOp::broadcast, data.size_bytes(), [&] { inner_->broadcast(data, root); });
}

void TimedCommunicator::barrier() {
  timed(CommOp::barrier, 0, [&] { inner_->barrier(); });
}

void TimedCommunicator::send(std::span<const float> data, int peer, int tag) {
  timed(CommOp::send, data.size_bytes(), [&] { inner_->send(data, peer, tag); });
}

void TimedCommunicator::send(std::span<const std::byte> data, int peer, int tag) {
  timed(CommOp::send, data.size_bytes(), [&] { inner_->send(data, peer, tag); });
}

void TimedCommunicator::recv(std::span<float> data, int peer, int tag) {
  timed(CommOp::recv, data.size_bytes(), [&] { inner_->recv(data, peer, tag); });
}

void TimedCommunicator::recv(std::span<std::byte> data, int peer, int tag) {
  timed(CommOp::recv, data.size_bytes(), [&] { inner_->recv(data, peer, tag); });
}

void TimedCommunicator::send_recv(std::span<const float> out, std::span<float> in, int peer,
                                  int send_tag, int recv_tag) {
  timed(CommOp::send_recv, out.size_bytes() + in.size_bytes(),
        [&] { inner_->send_recv(out, in, peer, send_tag, recv_tag); });
}

}  // namespace olmo2::parallel
