#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace olmo2::parallel {

namespace {

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, len);
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

// bf16 reductions (docs/architecture.md §6 (communicators)): MPI has no bf16 type, so
// bf16 travels as MPI_UINT16_T words and is reduced by these user functions, in f32,
// rounded to nearest even after each pairwise step. NaN wins a max, as in torch.max.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
    if (std::isnan(y)) continue;
    if (std::isnan(x) || x > y) b[i] = a[i];
  }
}

// The two bf16 MPI_Ops, made once per process on first use. They are freed at the start
// of MPI_Finalize, whoever calls it: MPI deletes MPI_COMM_SELF's attributes first thing
// in MPI_Finalize, while every MPI call is still allowed (the MPI standard, "Allowing
// User Functions at Process Termination"), and the attribute set here frees the ops
// from its delete callback (docs/architecture.md §6 (communicators)).
struct Bf16Ops {
  MPI_Op sum = MPI_OP_NULL;
  MPI_Op max = MPI_OP_NULL;
};
Bf16Ops g_bf16_ops;
std::mutex g_bf16_mutex;

int free_bf16_ops(MPI_Comm, int, void*, void*) {
  std::lock_guard<std::mutex> lock(g_bf16_mutex);
  if (g_bf16_ops.sum != MPI_OP_NULL) MPI_Op_free(&g_bf16_ops.sum);
  if (g_bf16_ops.max != MPI_OP_NULL) MPI_Op_free(&g_bf16_ops.max);
  return MPI_SUCCESS;
}

// The bf16 op for `op`, or MPI_OP_NULL with *rc set when MPI refused to make them.
MPI_Op bf16_op(ReduceOp op, int* rc) {
  std::lock_guard<std::mutex> lock(g_bf16_mutex);
  *rc = MPI_SUCCESS;
  if (g_bf16_ops.sum == MPI_OP_NULL) {
    MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;
    int keyval = MPI_KEYVAL_INVALID;
    if ((*rc = MPI_Op_create(&bf16_sum, /*commute=*/1, &sum)) != MPI_SUCCESS) return MPI_OP_NULL;
    if ((*rc = MPI_Op_create(&bf16_max, /*commute=*/1, &max)) != MPI_SUCCESS) {
      MPI_Op_free(&sum);
      return MPI_OP_NULL;
    }
    if ((*rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &free_bf16_ops, &keyval, nullptr)) !=
            MPI_SUCCESS ||
        (*rc = MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr)) != MPI_SUCCESS) {
      MPI_Op_free(&sum);
      MPI_Op_free(&max);
      return MPI_OP_NULL;
    }
    MPI_Comm_free_keyval(&keyval);  // the attribute keeps it until MPI_Finalize deletes it
    g_bf16_ops.sum = sum, g_bf16_ops.max = max;
  }
  return op == ReduceOp::Sum ? g_bf16_ops.sum : g_bf16_ops.max;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s)
    : name_(std::move(name)) {
  if (comm == MPI_COMM_NULL || comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF) {
    OLMO2_THROW(Error, "MpiCommunicator for group ", name_,
                " needs a communicator it can own and free (MPI_Comm_dup or MPI_Comm_split), "
                "not MPI_COMM_NULL, MPI_COMM_WORLD or MPI_COMM_SELF");
  }
  set_timeout(timeout_s);
  comm_ = comm;
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  void* ub = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found) == MPI_SUCCESS && found) {
    tag_ub_ = *static_cast<int*>(ub);
  }
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (pending_.request != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_Test(&pending_.request, &done, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&comm_);
}

void MpiCommunicator::set_timeout(double seconds) {
  if (!(seconds >= 0)) {
    OLMO2_THROW(InputError, "collective timeout ", seconds, " s for group ", name_,
                " must be ≥ 0 (0 = wait forever)");
  }
  timeout_s_ = seconds;
}

std::string MpiCommunicator::who() const {
  return detail::concat("rank ", world_rank_, " (", name_, " rank ", rank_, " of ", size_, ")");
}

std::string MpiCommunicator::describe(const Op& op) const {
  if (op.p2p) {
    return detail::concat(op.name, op.check_count ? " from " : " to ", name_, " rank ", op.peer,
                          " (tag ", op.tag, ") on group ", name_);
  }
  return detail::concat(op.name, " #", op.sequence, " on group ", name_);
}

std::string MpiCommunicator::details(const Op& op) const {
  if (!op.p2p && op.count == 0 && std::string_view(op.name) == "barrier") return "";
  std::string s = detail::concat(op.count, " ", dtype_name(op.dtype));
  if (op.p2p) s += detail::concat(", after collective #", op.sequence);
  return s;
}

void MpiCommunicator::check(int rc, const char* call, const Op& op) const {
  if (rc != MPI_SUCCESS) {
    OLMO2_THROW(Error, who(), ": ", call, " failed in ", describe(op), ": ", mpi_error_string(rc));
  }
}

std::string MpiCommunicator::device_note(Device device) const {
  if (device == Device::CPU) return "";
  return detail::concat("MpiCommunicator carries host memory only (Debian's Open MPI is not ",
                        device == Device::CUDA ? "CUDA" : device_name(device),
                        "-aware); device tensors go through the NCCL communicator");
}

MPI_Datatype MpiCommunicator::mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
    case DType::U8:
      return MPI_UINT8_T;
    case DType::BF16:
    case DType::F16:
      return MPI_UINT16_T;
  }
  OLMO2_THROW(ShapeError, "no MPI datatype for dtype ", static_cast<int>(dtype));
}

MPI_Op MpiCommunicator::reduction(ReduceOp op, DType dtype, const Op& call) const {
  if (dtype == DType::BF16) {
    int rc = MPI_SUCCESS;
    const MPI_Op o = bf16_op(op, &rc);
    check(rc, "MPI_Op_create (bf16)", call);
    return o;
  }
  return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX;
}

MpiCommunicator::Op MpiCommunicator::begin(const char* name, const TensorView& data, bool p2p) {
  if (pending_.active()) {
    OLMO2_THROW(Error, who(), ": ", name, " refused: ", describe(pending_.op),
                " timed out and is still pending (wait_pending() completes it)");
  }
  const size_t count = static_cast<size_t>(data.numel());
  if (count > static_cast<size_t>(INT_MAX)) {
    OLMO2_THROW(ShapeError, name, " on group ", name_, ": ", count, " ", dtype_name(data.dtype()),
                " elements exceed MPI's int count limit ", INT_MAX);
  }
  Op op;
  op.name = name;
  op.count = count;
  op.dtype = data.dtype();
  op.type = mpi_datatype(data.dtype());
  op.p2p = p2p;
  if (!p2p) ++sequence_;
  op.sequence = sequence_;
  return op;
}

template <typename Post>
void MpiCommunicator::run(const Op& op, const char* call, Post&& post) {
  MPI_Request request = MPI_REQUEST_NULL;
  check(post(static_cast<int>(op.count), &request), call, op);
  wait(&request, op, 0.0);
}

void MpiCommunicator::wait(MPI_Request* request, const Op& op, double waited_before_s) {
  using namespace std::chrono;
  const auto start = Clock::now();
  MPI_Status status;
  for (int polls = 0;; ++polls) {
    int done = 0;
    check(MPI_Test(request, &done, &status), "MPI_Test", op);
    if (done) break;
    const double here = duration<double>(Clock::now() - start).count();
    if (timeout_s_ > 0 && here >= timeout_s_) {
      const double waited = waited_before_s + here;
      pending_ = Pending{*request, op, waited};
      const std::string d = details(op);
      throw CollectiveTimeout(
          detail::concat(who(), ": ", describe(op), " timed out after ", seconds(waited), " s",
                         d.empty() ? "" : " (" + d + ")"),
          op.name, name_, op.sequence, waited, __FILE__, __LINE__);
    }
    // Spin briefly (small collectives finish in microseconds), then sleep so that
    // oversubscribed ranks hand the core to the peers they are waiting for.
    if (polls < 32) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(microseconds(here < 1.0 ? 20 : 500));
    }
  }
  if (op.check_count) {
    int got = 0;
    MPI_Get_count(&status, op.type, &got);
    if (got != static_cast<int>(op.count)) {
      if (got == MPI_UNDEFINED) {
        int bytes = 0;
        MPI_Get_count(&status, MPI_BYTE, &bytes);
        OLMO2_THROW(Error, who(), ": ", describe(op), " received ", bytes,
                    " bytes, not a whole number of ", dtype_name(op.dtype), ", expected ", op.count,
                    " ", dtype_name(op.dtype));
      }
      OLMO2_THROW(Error, who(), ": ", describe(op), " received ", got, " ", dtype_name(op.dtype),
                  ", expected ", op.count, " ", dtype_name(op.dtype));
    }
  }
}

std::string MpiCommunicator::pending() const {
  if (!pending_.active()) return "";
  return describe(pending_.op);
}

void MpiCommunicator::wait_pending() {
  if (!pending_.active()) return;
  Pending p = pending_;
  pending_ = Pending{};
  if (p.probe_into) return receive_checked(p.probe_into, p.op, p.waited_s);
  wait(&p.request, p.op, p.waited_s);
}

AsyncHandle MpiCommunicator::started(std::shared_ptr<MPI_Request> request, const Op& o) {
  // The request outlives the call in the handle; other collectives may be posted on this
  // communicator before it is waited for (docs/architecture.md §7 "Overlap", "ZeRO stages").
  return AsyncHandle([this, request, o] { wait(request.get(), o, 0.0); },
                     [this, request, o] {
                       int done = 0;
                       check(MPI_Test(request.get(), &done, MPI_STATUS_IGNORE), "MPI_Test", o);
                       return done != 0;
                     });
}

void MpiCommunicator::do_all_reduce(const TensorView& data, ReduceOp op, Stream stream) {
  do_all_reduce_start(data, op, stream).wait();
}

AsyncHandle MpiCommunicator::do_all_reduce_start(const TensorView& data, ReduceOp op, Stream) {
  const Op o = begin(op == ReduceOp::Sum ? "all_reduce_sum" : "all_reduce_max", data, false);
  const MPI_Op mop = reduction(op, data.dtype(), o);
  auto request = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
  check(MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(o.count), o.type, mop, comm_, request.get()),
        "MPI_Iallreduce", o);
  return started(std::move(request), o);
}

void MpiCommunicator::do_all_gather(const TensorView& in, const TensorView& out, Stream stream) {
  do_all_gather_start(in, out, stream).wait();
}

AsyncHandle MpiCommunicator::do_all_gather_start(const TensorView& in, const TensorView& out, Stream) {
  const Op o = begin("all_gather", in, false);
  auto request = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
  const int n = static_cast<int>(o.count);
  check(MPI_Iallgather(in.data(), n, o.type, out.data(), n, o.type, comm_, request.get()), "MPI_Iallgather", o);
  return started(std::move(request), o);
}

void MpiCommunicator::do_reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                                        Stream stream) {
  do_reduce_scatter_start(in, out, op, stream).wait();
}

AsyncHandle MpiCommunicator::do_reduce_scatter_start(const TensorView& in, const TensorView& out, ReduceOp op,
                                                     Stream) {
  const Op o = begin(op == ReduceOp::Sum ? "reduce_scatter_sum" : "reduce_scatter_max", out, false);
  const MPI_Op mop = reduction(op, in.dtype(), o);
  auto request = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
  check(MPI_Ireduce_scatter_block(in.data(), out.data(), static_cast<int>(o.count), o.type, mop, comm_,
                                  request.get()),
        "MPI_Ireduce_scatter_block", o);
  return started(std::move(request), o);
}

void MpiCommunicator::do_broadcast(const TensorView& data, int root, Stream) {
  const Op o = begin("broadcast", data, false);
  run(o, "MPI_Ibcast",
      [&](int n, MPI_Request* r) { return MPI_Ibcast(data.data(), n, o.type, root, comm_, r); });
}

void MpiCommunicator::do_barrier() {
  const Op o = begin("barrier", TensorView(nullptr, DType::U8, {0}), false);
  run(o, "MPI_Ibarrier", [&](int, MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
}

void MpiCommunicator::do_send(const TensorView& data, int peer, int tag, Stream) {
  Op o = begin("send", data, true);
  o.peer = peer;
  o.tag = tag;
  run(o, "MPI_Isend", [&](int n, MPI_Request* r) {
    return MPI_Isend(data.data(), n, o.type, peer, tag, comm_, r);
  });
}

AsyncHandle MpiCommunicator::do_send_start(const TensorView& data, int peer, int tag, Stream) {
  Op o = begin("send", data, true);
  o.peer = peer, o.tag = tag;
  auto request = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
  check(MPI_Isend(data.data(), static_cast<int>(o.count), o.type, peer, tag, comm_, request.get()), "MPI_Isend", o);
  return AsyncHandle([this, request, o] { wait(request.get(), o, 0.0); },
                     [this, request, o] {
                       int done = 0;
                       check(MPI_Test(request.get(), &done, MPI_STATUS_IGNORE), "MPI_Test", o);
                       return done != 0;
                     });
}

void MpiCommunicator::receive_checked(void* data, const Op& op, double waited_before_s) {
  using namespace std::chrono;
  const auto start = Clock::now();
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  for (int polls = 0;; ++polls) {
    int found = 0;
    check(MPI_Improbe(op.peer, op.tag, comm_, &found, &message, &status), "MPI_Improbe", op);
    if (found) break;
    const double here = duration<double>(Clock::now() - start).count();
    if (timeout_s_ > 0 && here >= timeout_s_) {
      const double waited = waited_before_s + here;
      // Nothing is posted yet: wait_pending() probes again and receives into `data`,
      // which must stay valid until then.
      pending_ = Pending{MPI_REQUEST_NULL, op, waited, data};
      const std::string d = details(op);
      throw CollectiveTimeout(detail::concat(who(), ": ", describe(op), " timed out after ", seconds(waited), " s",
                                             d.empty() ? "" : " (" + d + ")"),
                              op.name, name_, op.sequence, waited, __FILE__, __LINE__);
    }
    if (polls < 32) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(microseconds(here < 1.0 ? 20 : 500));
    }
  }
  int got = 0, bytes = 0;
  MPI_Get_count(&status, op.type, &got);
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  if (got != static_cast<int>(op.count)) {
    // Drained into memory of its own size: the expected buffer is never written.
    std::vector<char> scratch(static_cast<size_t>(std::max(bytes, 1)));
    check(MPI_Mrecv(scratch.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv", op);
    const std::string elements = got == MPI_UNDEFINED ? std::string("not a whole number of ") + dtype_name(op.dtype)
                                                      : detail::concat(got, " ", dtype_name(op.dtype));
    OLMO2_THROW(Error, who(), ": ", describe(op), " brought ", bytes, " bytes (", elements, "), expected ", op.count,
                " ", dtype_name(op.dtype),
                ": the ranks disagree on a shape (another --micro-batch, --seq-len or layout on one of them?)");
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Imrecv(data, static_cast<int>(op.count), op.type, &message, &request), "MPI_Imrecv", op);
  wait(&request, op, waited_before_s + duration<double>(Clock::now() - start).count());
}

void MpiCommunicator::do_recv(const TensorView& data, int peer, int tag, Stream) {
  Op o = begin("recv", data, true);
  o.peer = peer;
  o.tag = tag;
  o.check_count = true;
  receive_checked(data.data(), o, 0.0);
}

void MpiCommunicator::do_send_recv(const TensorView& out, const TensorView& in, int peer,
                                   int send_tag, int recv_tag, Stream) {
  Op rop = begin("recv", in, true);
  rop.peer = peer, rop.tag = recv_tag, rop.check_count = true;
  Op sop = begin("send", out, true);
  sop.peer = peer, sop.tag = send_tag;
  MPI_Request sreq = MPI_REQUEST_NULL;
  check(MPI_Isend(out.data(), static_cast<int>(sop.count), sop.type, peer, send_tag, comm_, &sreq),
        "MPI_Isend", sop);
  // The send is posted, so the peer's receive can complete while this one waits for its
  // message: no deadlock. The receive checks its size before any copy (receive_checked).
  const auto start = Clock::now();
  try {
    receive_checked(in.data(), rop, 0.0);
  } catch (const CollectiveTimeout&) {
    // The receive is left pending (wait_pending() completes it); the send goes on by
    // itself (MPI completes a freed request), reading `out`, which must stay valid.
    MPI_Request_free(&sreq);
    throw;
  } catch (...) {
    wait(&sreq, sop, 0.0);  // a refused receive: the peer takes this message (or times out)
    throw;
  }
  wait(&sreq, sop, std::chrono::duration<double>(Clock::now() - start).count());
}

}  // namespace olmo2::parallel
