// An in-process Communicator for unit tests: this process plays one rank of a group
// whose other ranks are simulated by a callback that says what each of them holds.
// Arithmetic is done in each view's dtype (f32 sums in f32, i64 in i64, bf16 in f32
// rounded after each addition), so a caller that sends the wrong dtype gets the wrong
// answer here as it would over MPI (docs/architecture.md §10 (tests and fixtures)).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace olmo2::parallel::test {

class FakeCommunicator final : public Communicator {
 public:
  /// Fills `into` (dtype and element count of the call) with what simulated rank `peer`
  /// holds: its contribution to a reduction or gather, root's data for a broadcast, the
  /// message for a recv.
  using Peer = std::function<void(int peer, const TensorView& into)>;

  /// One recorded call: "all_reduce_sum", "all_gather", ...; dtype and elements of the
  /// data (all_gather: in; reduce_scatter: out).
  struct Call {
    std::string op;
    DType dtype;
    int64_t count;
  };

  /// Rank `rank` of `size`; `peer` says what the others hold (null: zeros).
  FakeCommunicator(int rank, int size, Peer peer = {}, std::string name = "fake")
      : rank_(rank), size_(size), peer_(std::move(peer)), name_(std::move(name)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  uint64_t sequence() const override { return sequence_; }
  double timeout_s() const override { return timeout_; }
  void set_timeout(double s) override { timeout_ = s; }
  bool supports(Device d) const override { return d == Device::CPU; }
  int tag_limit() const override { return 32767; }
  std::string pending() const override { return ""; }
  void wait_pending() override {}

  /// Every call that reached the implementation, in order.
  const std::vector<Call>& calls() const { return calls_; }

 protected:
  void do_all_reduce(const TensorView& data, ReduceOp op, Stream) override {
    record(op == ReduceOp::Sum ? "all_reduce_sum" : "all_reduce_max", data, true);
    std::vector<unsigned char> mine(data.bytes()), theirs(data.bytes());
    std::memcpy(mine.data(), data.data(), data.bytes());
    // Rank order 0, 1, ..., each combined into the running value.
    std::vector<unsigned char> acc;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) {
        theirs = mine;
      } else {
        fill(r, data.dtype(), data.numel(), theirs.data());
      }
      if (r == 0) {
        acc = theirs;
      } else {
        combine(op, data.dtype(), data.numel(), theirs.data(), acc.data());
      }
    }
    std::memcpy(data.data(), acc.data(), data.bytes());
  }
  void do_all_gather(const TensorView& in, const TensorView& out, Stream) override {
    record("all_gather", in, true);
    auto* o = static_cast<unsigned char*>(out.data());
    for (int r = 0; r < size_; ++r) {
      unsigned char* at = o + static_cast<size_t>(r) * in.bytes();
      if (r == rank_) {
        std::memcpy(at, in.data(), in.bytes());
      } else {
        fill(r, in.dtype(), in.numel(), at);
      }
    }
  }
  void do_reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                         Stream s) override {
    std::vector<unsigned char> whole(in.bytes());
    std::memcpy(whole.data(), in.data(), in.bytes());
    TensorView w(whole.data(), in.dtype(), {in.numel()});
    do_all_reduce(w, op, s);  // recorded (and counted) once, renamed below
    calls_.back() = {op == ReduceOp::Sum ? "reduce_scatter_sum" : "reduce_scatter_max", out.dtype(),
                     out.numel()};
    std::memcpy(out.data(), whole.data() + static_cast<size_t>(rank_) * out.bytes(), out.bytes());
  }
  void do_broadcast(const TensorView& data, int root, Stream) override {
    record("broadcast", data, true);
    if (root != rank_) fill(root, data.dtype(), data.numel(), data.data());
  }
  void do_send(const TensorView& data, int, int, Stream) override { record("send", data, false); }
  void do_recv(const TensorView& data, int peer, int, Stream) override {
    record("recv", data, false);
    fill(peer, data.dtype(), data.numel(), data.data());
  }
  void do_send_recv(const TensorView& out, const TensorView& in, int peer, int, int,
                    Stream) override {
    record("send_recv", out, false);
    fill(peer, in.dtype(), in.numel(), in.data());
  }
  void do_barrier() override { record("barrier", TensorView(nullptr, DType::U8, {0}), true); }

 private:
  void record(const char* op, const TensorView& v, bool collective) {
    calls_.push_back({op, v.dtype(), v.numel()});
    if (collective) ++sequence_;
  }
  void fill(int peer, DType dtype, int64_t n, void* into) const {
    TensorView v(into, dtype, {n});
    std::memset(into, 0, v.bytes());
    if (peer_) peer_(peer, v);
  }
  template <typename T>
  static void combine_as(ReduceOp op, int64_t n, const void* a, void* acc) {
    const T* x = static_cast<const T*>(a);
    T* y = static_cast<T*>(acc);
    for (int64_t i = 0; i < n; ++i) {
      y[i] = op == ReduceOp::Sum ? static_cast<T>(y[i] + x[i]) : (x[i] > y[i] ? x[i] : y[i]);
    }
  }
  static void combine(ReduceOp op, DType dtype, int64_t n, const void* a, void* acc) {
    switch (dtype) {
      case DType::F32: return combine_as<float>(op, n, a, acc);
      case DType::F64: return combine_as<double>(op, n, a, acc);
      case DType::I32: return combine_as<int32_t>(op, n, a, acc);
      case DType::I64: return combine_as<int64_t>(op, n, a, acc);
      case DType::U8: return combine_as<uint8_t>(op, n, a, acc);
      case DType::BF16: {
        const auto* x = static_cast<const uint16_t*>(a);
        auto* y = static_cast<uint16_t*>(acc);
        for (int64_t i = 0; i < n; ++i) {
          const float p = bf16_to_f32(x[i]), q = bf16_to_f32(y[i]);
          y[i] = op == ReduceOp::Sum ? f32_to_bf16(p + q) : (p > q ? x[i] : y[i]);
        }
        return;
      }
      case DType::F16: break;
    }
    OLMO2_THROW(ShapeError, "FakeCommunicator: cannot combine ", dtype_name(dtype));
  }

  int rank_, size_;
  Peer peer_;
  std::string name_;
  uint64_t sequence_ = 0;
  double timeout_ = 0;
  std::vector<Call> calls_;
};

}  // namespace olmo2::parallel::test
