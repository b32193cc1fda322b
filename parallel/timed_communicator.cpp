#include "parallel/timed_communicator.h"

#include <chrono>
#include <memory>

#include "core/error.h"

namespace olmo2::parallel {

const char* to_string(CommOp op) {
  static constexpr const char* kNames[kCommOpCount] = {
      "all_reduce_sum", "all_reduce_max", "all_gather", "reduce_scatter_sum", "broadcast",
      "barrier",        "send",           "recv",       "send_recv",          "reduce_scatter_max"};
  const int i = static_cast<int>(op);
  return i >= 0 && i < kCommOpCount ? kNames[i] : "unknown";
}

TimedCommunicator::TimedCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)) {
  if (!inner_) OLMO2_THROW(Error, "TimedCommunicator: null communicator");
}

namespace {
using Clock = std::chrono::steady_clock;
struct Account {  // adds the time on return and on throw alike
  CommOpStats& s;
  Clock::time_point t0;
  ~Account() { s.seconds += std::chrono::duration<double>(Clock::now() - t0).count(); }
};
}  // namespace

template <typename Fn>
void TimedCommunicator::timed(CommOp op, uint64_t bytes, Fn&& fn) {
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

void TimedCommunicator::do_all_reduce(const TensorView& data, ReduceOp op, Stream stream) {
  timed(op == ReduceOp::Sum ? CommOp::all_reduce_sum : CommOp::all_reduce_max, data.bytes(),
        [&] { inner_->all_reduce(data, op, stream); });
}

void TimedCommunicator::do_all_gather(const TensorView& in, const TensorView& out, Stream stream) {
  timed(CommOp::all_gather, out.bytes(), [&] { inner_->all_gather(in, out, stream); });
}

template <typename Start>
AsyncHandle TimedCommunicator::timed_start(CommOp op, uint64_t bytes, Start&& start) {
  auto inner = std::make_shared<AsyncHandle>();
  timed(op, bytes, [&] { *inner = start(); });
  CommOpStats* s = &stats_[static_cast<int>(op)];
  return AsyncHandle([s, inner] { Account account{*s, Clock::now()}; inner->wait(); },
                     [s, inner] {
                       Account account{*s, Clock::now()};
                       return inner->test();
                     });
}

AsyncHandle TimedCommunicator::do_all_gather_start(const TensorView& in, const TensorView& out, Stream stream) {
  return timed_start(CommOp::all_gather, out.bytes(), [&] { return inner_->all_gather_start(in, out, stream); });
}

AsyncHandle TimedCommunicator::do_all_reduce_start(const TensorView& data, ReduceOp op, Stream stream) {
  return timed_start(op == ReduceOp::Sum ? CommOp::all_reduce_sum : CommOp::all_reduce_max, data.bytes(),
                     [&] { return inner_->all_reduce_start(data, op, stream); });
}

AsyncHandle TimedCommunicator::do_reduce_scatter_start(const TensorView& in, const TensorView& out, ReduceOp op,
                                                       Stream stream) {
  return timed_start(op == ReduceOp::Sum ? CommOp::reduce_scatter_sum : CommOp::reduce_scatter_max, in.bytes(),
                     [&] { return inner_->reduce_scatter_start(in, out, op, stream); });
}

AsyncHandle TimedCommunicator::do_send_start(const TensorView& data, int peer, int tag, Stream stream) {
  return timed_start(CommOp::send, data.bytes(), [&] { return inner_->send_start(data, peer, tag, stream); });
}

AsyncHandle TimedCommunicator::do_recv_start(const TensorView& data, int peer, int tag, Stream stream) {
  return timed_start(CommOp::recv, data.bytes(), [&] { return inner_->recv_start(data, peer, tag, stream); });
}

void TimedCommunicator::do_reduce_scatter(const TensorView& in, const TensorView& out,
                                          ReduceOp op, Stream stream) {
  timed(op == ReduceOp::Sum ? CommOp::reduce_scatter_sum : CommOp::reduce_scatter_max, in.bytes(),
        [&] { inner_->reduce_scatter(in, out, op, stream); });
}

void TimedCommunicator::do_broadcast(const TensorView& data, int root, Stream stream) {
  timed(CommOp::broadcast, data.bytes(), [&] { inner_->broadcast(data, root, stream); });
}

void TimedCommunicator::do_barrier() {
  timed(CommOp::barrier, 0, [&] { inner_->barrier(); });
}

void TimedCommunicator::do_send(const TensorView& data, int peer, int tag, Stream stream) {
  timed(CommOp::send, data.bytes(), [&] { inner_->send(data, peer, tag, stream); });
}

void TimedCommunicator::do_recv(const TensorView& data, int peer, int tag, Stream stream) {
  timed(CommOp::recv, data.bytes(), [&] { inner_->recv(data, peer, tag, stream); });
}

void TimedCommunicator::do_send_recv(const TensorView& out, const TensorView& in, int peer,
                                     int send_tag, int recv_tag, Stream stream) {
  timed(CommOp::send_recv, out.bytes() + in.bytes(),
        [&] { inner_->send_recv(out, in, peer, send_tag, recv_tag, stream); });
}

}  // namespace olmo2::parallel
