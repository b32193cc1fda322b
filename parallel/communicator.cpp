// The checks every Communicator call passes before an implementation sees it, and the
// host-span conveniences (docs/architecture.md §6 (communicators)).
#include "parallel/communicator.h"

#include <cstdint>
#include <type_traits>
#include <utility>

namespace olmo2::parallel {

namespace {

// Dense row-major: every dimension of more than one element has the stride of the
// dimensions after it (a dimension of one element may have any stride).
bool is_dense(const TensorView& v) {
  if (v.numel() == 0) return true;
  int64_t want = 1;
  for (int d = v.dim() - 1; d >= 0; --d) {
    if (v.size(d) != 1 && v.stride(d) != want) return false;
    want *= v.size(d);
  }
  return true;
}

bool overlap(const TensorView& a, const TensorView& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a.data()), pb = reinterpret_cast<uintptr_t>(b.data());
  return pa < pb + b.bytes() && pb < pa + a.bytes();
}

std::string strides_str(const TensorView& v) { return shape_to_string(v.strides()); }

std::string op_name(const char* base, ReduceOp op) {
  return std::string(base) + "_" + reduce_op_name(op);
}

// A 1-d CPU view of a host span. The communicator never writes through a view it
// sends, so the const of a send buffer may be cast away.
template <typename T>
TensorView host_view(std::span<T> s, DType dtype) {
  using Mutable = std::remove_const_t<T>;
  return TensorView(const_cast<Mutable*>(s.data()), dtype, {static_cast<int64_t>(s.size())});
}

template <typename T>
TensorView host_view(std::span<T> s) {
  return host_view(s, dtype_of<std::remove_const_t<T>>());
}

// uint64_t has no DType: it moves as i64 words, bit for bit.
TensorView host_view(std::span<uint64_t> s) { return host_view(s, DType::I64); }
TensorView host_view(std::span<const uint64_t> s) { return host_view(s, DType::I64); }
TensorView host_view(std::span<std::byte> s) { return host_view(s, DType::U8); }
TensorView host_view(std::span<const std::byte> s) { return host_view(s, DType::U8); }

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Max:
      return "max";
  }
  return "unknown";
}

std::string Communicator::device_note(Device) const { return ""; }

void Communicator::check_view(const char* op, const char* role, const TensorView& v,
                              Stream stream) const {
  if (v.numel() > 0 && v.data() == nullptr) {
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": ", role, " ", v.shape_str(), " ",
                dtype_name(v.dtype()), " has no data (null pointer)");
  }
  if (!is_dense(v)) {
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": ", role, " ", v.shape_str(),
                " with strides ", strides_str(v), " is not contiguous");
  }
  if (!supports(v.device())) {
    const std::string note = device_note(v.device());
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": ", role, " is a ", device_name(v.device()),
                " view, which this communicator does not carry", note.empty() ? "" : ": ", note);
  }
  if (stream.device != v.device()) {
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": ", role, " is on ", device_name(v.device()),
                " but the stream is on ", device_name(stream.device));
  }
}

void Communicator::check_reducible(const char* op, const TensorView& v) const {
  if (v.dtype() == DType::F16) {
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": ", dtype_name(v.dtype()),
                " cannot be reduced (reductions take f32, bf16, f64, i32, i64, u8)");
  }
}

void Communicator::check_pair(const char* op, const char* a_role, const TensorView& a,
                              const char* b_role, const TensorView& b) const {
  if (a.dtype() != b.dtype()) {
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": ", a_role, " is ", dtype_name(a.dtype()),
                " but ", b_role, " is ", dtype_name(b.dtype()), " (they must be the same dtype)");
  }
  if (a.device() != b.device()) {
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": ", a_role, " is on ",
                device_name(a.device()), " but ", b_role, " is on ", device_name(b.device()));
  }
  if (overlap(a, b)) {
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": ", a_role, " and ", b_role, " overlap");
  }
}

void Communicator::check_root(const char* op, int root) const {
  if (root < 0 || root >= size()) {
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": root ", root, " out of range [0, ", size(),
                ")");
  }
}

void Communicator::check_peer(const char* op, int peer, int tag) const {
  if (peer < 0 || peer >= size() || peer == rank()) {
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": peer ", peer, " must be another rank of [0, ",
                size(), "), this is rank ", rank());
  }
  if (tag < 0 || tag > tag_limit()) {
    OLMO2_THROW(ShapeError, op, " on group ", name(), ": tag ", tag, " out of range [0, ",
                tag_limit(), "]");
  }
}

void Communicator::check_all_reduce(const std::string& n, const TensorView& data, Stream stream) const {
  check_view(n.c_str(), "data", data, stream);
  check_reducible(n.c_str(), data);
}

void Communicator::all_reduce(const TensorView& data, ReduceOp op, Stream stream) {
  check_all_reduce(op_name("all_reduce", op), data, stream);
  do_all_reduce(data, op, stream);
}

AsyncHandle Communicator::all_reduce_start(const TensorView& data, ReduceOp op, Stream stream) {
  check_all_reduce(op_name("all_reduce", op), data, stream);
  return do_all_reduce_start(data, op, stream);
}

AsyncHandle Communicator::do_all_reduce_start(const TensorView& data, ReduceOp op, Stream stream) {
  do_all_reduce(data, op, stream);
  return AsyncHandle();
}

AsyncHandle& AsyncHandle::operator=(AsyncHandle&& other) noexcept {
  if (this != &other) {
    AsyncHandle old(std::move(*this));  // waits for the operation this handle had, if any
    finish_ = std::exchange(other.finish_, nullptr);
    test_ = std::exchange(other.test_, nullptr);
  }
  return *this;
}

AsyncHandle::~AsyncHandle() {
  if (!finish_) return;
  try {
    wait();
  } catch (...) {  // a destructor cannot throw; the communicator reports the operation as pending
  }
}

void AsyncHandle::wait() {
  if (!finish_) return;
  const std::function<void()> finish = std::exchange(finish_, nullptr);
  test_ = nullptr;
  finish();
}

bool AsyncHandle::test() {
  if (!finish_) return true;
  return test_ ? test_() : false;
}

void Communicator::all_gather(const TensorView& in, const TensorView& out, Stream stream) {
  check_all_gather(in, out, stream);
  do_all_gather(in, out, stream);
}

AsyncHandle Communicator::all_gather_start(const TensorView& in, const TensorView& out, Stream stream) {
  check_all_gather(in, out, stream);
  return do_all_gather_start(in, out, stream);
}

AsyncHandle Communicator::do_all_gather_start(const TensorView& in, const TensorView& out, Stream stream) {
  do_all_gather(in, out, stream);
  return AsyncHandle();
}

void Communicator::check_all_gather(const TensorView& in, const TensorView& out, Stream stream) const {
  const char* n = "all_gather";
  check_view(n, "in", in, stream);
  check_view(n, "out", out, stream);
  check_pair(n, "in", in, "out", out);
  if (out.numel() != in.numel() * size()) {
    OLMO2_THROW(ShapeError, n, " on group ", name(), ": out has ", out.numel(), " ",
                dtype_name(out.dtype()), ", expected ", size(), " ranks × in ", in.numel(), " = ",
                in.numel() * size());
  }
}

void Communicator::check_reduce_scatter(const std::string& s, const TensorView& in, const TensorView& out,
                                        Stream stream) const {
  const char* n = s.c_str();
  check_view(n, "in", in, stream);
  check_view(n, "out", out, stream);
  check_pair(n, "in", in, "out", out);
  if (in.numel() != out.numel() * size()) {
    OLMO2_THROW(ShapeError, n, " on group ", name(), ": in has ", in.numel(), " ",
                dtype_name(in.dtype()), ", expected ", size(), " ranks × out ", out.numel(), " = ",
                out.numel() * size());
  }
  check_reducible(n, in);
}

void Communicator::reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                                  Stream stream) {
  check_reduce_scatter(op_name("reduce_scatter", op), in, out, stream);
  do_reduce_scatter(in, out, op, stream);
}

AsyncHandle Communicator::reduce_scatter_start(const TensorView& in, const TensorView& out, ReduceOp op,
                                               Stream stream) {
  check_reduce_scatter(op_name("reduce_scatter", op), in, out, stream);
  return do_reduce_scatter_start(in, out, op, stream);
}

AsyncHandle Communicator::do_reduce_scatter_start(const TensorView& in, const TensorView& out, ReduceOp op,
                                                  Stream stream) {
  do_reduce_scatter(in, out, op, stream);
  return AsyncHandle();
}

void Communicator::broadcast(const TensorView& data, int root, Stream stream) {
  check_root("broadcast", root);
  check_view("broadcast", "data", data, stream);
  do_broadcast(data, root, stream);
}

void Communicator::send(const TensorView& data, int peer, int tag, Stream stream) {
  check_peer("send", peer, tag);
  check_view("send", "data", data, stream);
  do_send(data, peer, tag, stream);
}

void Communicator::recv(const TensorView& data, int peer, int tag, Stream stream) {
  check_peer("recv", peer, tag);
  check_view("recv", "data", data, stream);
  do_recv(data, peer, tag, stream);
}

AsyncHandle Communicator::send_start(const TensorView& data, int peer, int tag, Stream stream) {
  check_peer("send", peer, tag);
  check_view("send", "data", data, stream);
  return do_send_start(data, peer, tag, stream);
}

AsyncHandle Communicator::recv_start(const TensorView& data, int peer, int tag, Stream stream) {
  check_peer("recv", peer, tag);
  check_view("recv", "data", data, stream);
  return do_recv_start(data, peer, tag, stream);
}

AsyncHandle Communicator::do_send_start(const TensorView& data, int peer, int tag, Stream stream) {
  do_send(data, peer, tag, stream);
  return AsyncHandle();
}

AsyncHandle Communicator::do_recv_start(const TensorView& data, int peer, int tag, Stream stream) {
  return AsyncHandle([this, data, peer, tag, stream] { do_recv(data, peer, tag, stream); });
}

void Communicator::send_recv(const TensorView& out, const TensorView& in, int peer, int send_tag,
                             int recv_tag, Stream stream) {
  check_peer("send_recv", peer, send_tag);
  check_peer("send_recv", peer, recv_tag);
  check_view("send_recv", "out", out, stream);
  check_view("send_recv", "in", in, stream);
  check_pair("send_recv", "out", out, "in", in);
  do_send_recv(out, in, peer, send_tag, recv_tag, stream);
}

void Communicator::barrier() { do_barrier(); }

// ---- Host-span conveniences -------------------------------------------------------

void Communicator::all_reduce_sum(std::span<float> d) { all_reduce(host_view(d), ReduceOp::Sum); }
void Communicator::all_reduce_sum(std::span<double> d) { all_reduce(host_view(d), ReduceOp::Sum); }
void Communicator::all_reduce_sum(std::span<int32_t> d) { all_reduce(host_view(d), ReduceOp::Sum); }
void Communicator::all_reduce_sum(std::span<int64_t> d) { all_reduce(host_view(d), ReduceOp::Sum); }
void Communicator::all_reduce_sum(std::span<uint8_t> d) { all_reduce(host_view(d), ReduceOp::Sum); }

void Communicator::all_reduce_max(std::span<float> d) { all_reduce(host_view(d), ReduceOp::Max); }
void Communicator::all_reduce_max(std::span<double> d) { all_reduce(host_view(d), ReduceOp::Max); }
void Communicator::all_reduce_max(std::span<int32_t> d) { all_reduce(host_view(d), ReduceOp::Max); }
void Communicator::all_reduce_max(std::span<int64_t> d) { all_reduce(host_view(d), ReduceOp::Max); }
void Communicator::all_reduce_max(std::span<uint8_t> d) { all_reduce(host_view(d), ReduceOp::Max); }

void Communicator::all_gather(std::span<const float> in, std::span<float> out) {
  all_gather(host_view(in), host_view(out));
}
void Communicator::all_gather(std::span<const double> in, std::span<double> out) {
  all_gather(host_view(in), host_view(out));
}
void Communicator::all_gather(std::span<const int32_t> in, std::span<int32_t> out) {
  all_gather(host_view(in), host_view(out));
}
void Communicator::all_gather(std::span<const int64_t> in, std::span<int64_t> out) {
  all_gather(host_view(in), host_view(out));
}
void Communicator::all_gather(std::span<const uint8_t> in, std::span<uint8_t> out) {
  all_gather(host_view(in), host_view(out));
}
void Communicator::all_gather(std::span<const uint64_t> in, std::span<uint64_t> out) {
  all_gather(host_view(in), host_view(out));
}

void Communicator::reduce_scatter_sum(std::span<const float> in, std::span<float> out) {
  reduce_scatter(host_view(in), host_view(out), ReduceOp::Sum);
}
void Communicator::reduce_scatter_sum(std::span<const double> in, std::span<double> out) {
  reduce_scatter(host_view(in), host_view(out), ReduceOp::Sum);
}
void Communicator::reduce_scatter_sum(std::span<const int32_t> in, std::span<int32_t> out) {
  reduce_scatter(host_view(in), host_view(out), ReduceOp::Sum);
}
void Communicator::reduce_scatter_sum(std::span<const int64_t> in, std::span<int64_t> out) {
  reduce_scatter(host_view(in), host_view(out), ReduceOp::Sum);
}
void Communicator::reduce_scatter_sum(std::span<const uint8_t> in, std::span<uint8_t> out) {
  reduce_scatter(host_view(in), host_view(out), ReduceOp::Sum);
}

void Communicator::broadcast(std::span<float> d, int root) { broadcast(host_view(d), root); }
void Communicator::broadcast(std::span<double> d, int root) { broadcast(host_view(d), root); }
void Communicator::broadcast(std::span<int32_t> d, int root) { broadcast(host_view(d), root); }
void Communicator::broadcast(std::span<int64_t> d, int root) { broadcast(host_view(d), root); }
void Communicator::broadcast(std::span<uint8_t> d, int root) { broadcast(host_view(d), root); }
void Communicator::broadcast(std::span<uint64_t> d, int root) { broadcast(host_view(d), root); }
void Communicator::broadcast(std::span<std::byte> d, int root) { broadcast(host_view(d), root); }

void Communicator::send(std::span<const float> d, int peer, int tag) { send(host_view(d), peer, tag); }
void Communicator::send(std::span<const double> d, int peer, int tag) { send(host_view(d), peer, tag); }
void Communicator::send(std::span<const int32_t> d, int peer, int tag) { send(host_view(d), peer, tag); }
void Communicator::send(std::span<const int64_t> d, int peer, int tag) { send(host_view(d), peer, tag); }
void Communicator::send(std::span<const uint8_t> d, int peer, int tag) { send(host_view(d), peer, tag); }
void Communicator::send(std::span<const uint64_t> d, int peer, int tag) { send(host_view(d), peer, tag); }
void Communicator::send(std::span<const std::byte> d, int peer, int tag) { send(host_view(d), peer, tag); }

void Communicator::recv(std::span<float> d, int peer, int tag) { recv(host_view(d), peer, tag); }
void Communicator::recv(std::span<double> d, int peer, int tag) { recv(host_view(d), peer, tag); }
void Communicator::recv(std::span<int32_t> d, int peer, int tag) { recv(host_view(d), peer, tag); }
void Communicator::recv(std::span<int64_t> d, int peer, int tag) { recv(host_view(d), peer, tag); }
void Communicator::recv(std::span<uint8_t> d, int peer, int tag) { recv(host_view(d), peer, tag); }
void Communicator::recv(std::span<uint64_t> d, int peer, int tag) { recv(host_view(d), peer, tag); }
void Communicator::recv(std::span<std::byte> d, int peer, int tag) { recv(host_view(d), peer, tag); }

void Communicator::send_recv(std::span<const float> out, std::span<float> in, int peer, int send_tag,
                             int recv_tag) {
  send_recv(host_view(out), host_view(in), peer, send_tag, recv_tag);
}

}  // namespace olmo2::parallel
