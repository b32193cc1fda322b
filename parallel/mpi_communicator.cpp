#include "parallel/mpi_communicator.h"

#include <climits>
#include <cstdio>
#include <string_view>
#include <thread>

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

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
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
  std::string s = detail::concat(op.count, op.type == MPI_FLOAT ? " floats" : " bytes");
  if (op.p2p) s += detail::concat(", after collective #", op.sequence);
  return s;
}

void MpiCommunicator::check(int rc, const char* call, const Op& op) const {
  if (rc != MPI_SUCCESS) {
    OLMO2_THROW(Error, who(), ": ", call, " failed in ", describe(op), ": ", mpi_error_string(rc));
  }
}

void MpiCommunicator::check_root(const char* name, int root) const {
  if (root < 0 || root >= size_) {
    OLMO2_THROW(ShapeError, name, " on group ", name_, ": root ", root, " out of range [0, ", size_,
                ")");
  }
}

void MpiCommunicator::check_peer(const char* name, int peer, int tag) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    OLMO2_THROW(ShapeError, name, " on group ", name_, ": peer ", peer,
                " must be another rank of [0, ", size_, "), this is rank ", rank_);
  }
  if (tag < 0 || tag > tag_ub_) {
    OLMO2_THROW(ShapeError, name, " on group ", name_, ": tag ", tag, " out of range [0, ", tag_ub_,
                "]");
  }
}

MpiCommunicator::Op MpiCommunicator::begin(const char* name, size_t count, MPI_Datatype type,
                                           bool p2p) {
  if (pending_.request != MPI_REQUEST_NULL) {
    OLMO2_THROW(Error, who(), ": ", name, " refused: ", describe(pending_.op),
                " timed out and is still pending (wait_pending() completes it)");
  }
  if (count > static_cast<size_t>(INT_MAX)) {
    OLMO2_THROW(ShapeError, name, " on group ", name_, ": ", count,
                " elements exceed MPI's int count limit ", INT_MAX);
  }
  Op op;
  op.name = name;
  op.count = count;
  op.type = type;
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
      OLMO2_THROW(Error, who(), ": ", describe(op), " received ", got,
                  op.type == MPI_FLOAT ? " floats" : " bytes", ", expected ", op.count);
    }
  }
}

std::string MpiCommunicator::pending() const {
  if (pending_.request == MPI_REQUEST_NULL) return "";
  return describe(pending_.op);
}

void MpiCommunicator::wait_pending() {
  if (pending_.request == MPI_REQUEST_NULL) return;
  Pending p = pending_;
  pending_ = Pending{};
  wait(&p.request, p.op, p.waited_s);
}

void MpiCommunicator::all_reduce_sum(std::span<float> data) {
  const Op op = begin("all_reduce_sum", data.size(), MPI_FLOAT, false);
  run(op, "MPI_Iallreduce", [&](int n, MPI_Request* r) {
    return MPI_Iallreduce(MPI_IN_PLACE, data.data(), n, MPI_FLOAT, MPI_SUM, comm_, r);
  });
}

void MpiCommunicator::all_reduce_max(std::span<float> data) {
  const Op op = begin("all_reduce_max", data.size(), MPI_FLOAT, false);
  run(op, "MPI_Iallreduce", [&](int n, MPI_Request* r) {
    return MPI_Iallreduce(MPI_IN_PLACE, data.data(), n, MPI_FLOAT, MPI_MAX, comm_, r);
  });
}

void MpiCommunicator::all_gather(std::span<const float> in, std::span<float> out) {
  if (out.size() != in.size() * size_) {
    OLMO2_THROW(ShapeError, "all_gather on group ", name_, ": out has ", out.size(),
                " floats, expected ", size_, " ranks × in ", in.size(), " = ", in.size() * size_);
  }
  if (overlap(in.data(), in.size_bytes(), out.data(), out.size_bytes())) {
    OLMO2_THROW(ShapeError, "all_gather on group ", name_, ": in and out overlap");
  }
  const Op op = begin("all_gather", in.size(), MPI_FLOAT, false);
  run(op, "MPI_Iallgather", [&](int n, MPI_Request* r) {
    return MPI_Iallgather(in.data(), n, MPI_FLOAT, out.data(), n, MPI_FLOAT, comm_, r);
  });
}

void MpiCommunicator::reduce_scatter_sum(std::span<const float> in, std::span<float> out) {
  if (in.size() != out.size() * size_) {
    OLMO2_THROW(ShapeError, "reduce_scatter_sum on group ", name_, ": in has ", in.size(),
                " floats, expected ", size_, " ranks × out ", out.size(), " = ",
                out.size() * size_);
  }
  if (overlap(in.data(), in.size_bytes(), out.data(), out.size_bytes())) {
    OLMO2_THROW(ShapeError, "reduce_scatter_sum on group ", name_, ": in and out overlap");
  }
  const Op op = begin("reduce_scatter_sum", out.size(), MPI_FLOAT, false);
  run(op, "MPI_Ireduce_scatter_block", [&](int n, MPI_Request* r) {
    return MPI_Ireduce_scatter_block(in.data(), out.data(), n, MPI_FLOAT, MPI_SUM, comm_, r);
  });
}

void MpiCommunicator::broadcast(std::span<float> data, int root) {
  check_root("broadcast", root);
  const Op op = begin("broadcast", data.size(), MPI_FLOAT, false);
  run(op, "MPI_Ibcast",
      [&](int n, MPI_Request* r) { return MPI_Ibcast(data.data(), n, MPI_FLOAT, root, comm_, r); });
}

void MpiCommunicator::broadcast(std::span<std::byte> data, int root) {
  check_root("broadcast", root);
  const Op op = begin("broadcast", data.size(), MPI_BYTE, false);
  run(op, "MPI_Ibcast",
      [&](int n, MPI_Request* r) { return MPI_Ibcast(data.data(), n, MPI_BYTE, root, comm_, r); });
}

void MpiCommunicator::barrier() {
  const Op op = begin("barrier", 0, MPI_BYTE, false);
  run(op, "MPI_Ibarrier", [&](int, MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
}

void MpiCommunicator::send(std::span<const float> data, int peer, int tag) {
  send_raw(data.data(), data.size(), MPI_FLOAT, peer, tag);
}

void MpiCommunicator::send(std::span<const std::byte> data, int peer, int tag) {
  send_raw(data.data(), data.size(), MPI_BYTE, peer, tag);
}

void MpiCommunicator::recv(std::span<float> data, int peer, int tag) {
  recv_raw(data.data(), data.size(), MPI_FLOAT, peer, tag);
}

void MpiCommunicator::recv(std::span<std::byte> data, int peer, int tag) {
  recv_raw(data.data(), data.size(), MPI_BYTE, peer, tag);
}

void MpiCommunicator::send_raw(const void* data, size_t count, MPI_Datatype type, int peer,
                               int tag) {
  check_peer("send", peer, tag);
  Op op = begin("send", count, type, true);
  op.peer = peer;
  op.tag = tag;
  run(op, "MPI_Isend",
      [&](int n, MPI_Request* r) { return MPI_Isend(data, n, type, peer, tag, comm_, r); });
}

void MpiCommunicator::recv_raw(void* data, size_t count, MPI_Datatype type, int peer, int tag) {
  check_peer("recv", peer, tag);
  Op op = begin("recv", count, type, true);
  op.peer = peer;
  op.tag = tag;
  op.check_count = true;
  run(op, "MPI_Irecv",
      [&](int n, MPI_Request* r) { return MPI_Irecv(data, n, type, peer, tag, comm_, r); });
}

void MpiCommunicator::send_recv(std::span<const float> out, std::span<float> in, int peer, int send_tag,
                                int recv_tag) {
  check_peer("send_recv", peer, send_tag);
  check_peer("send_recv", peer, recv_tag);
  if (overlap(out.data(), out.size_bytes(), in.data(), in.size_bytes())) {
    OLMO2_THROW(ShapeError, "send_recv on group ", name_, ": out and in overlap");
  }
  Op rop = begin("recv", in.size(), MPI_FLOAT, true);
  rop.peer = peer, rop.tag = recv_tag, rop.check_count = true;
  Op sop = begin("send", out.size(), MPI_FLOAT, true);
  sop.peer = peer, sop.tag = send_tag;
  MPI_Request rreq = MPI_REQUEST_NULL, sreq = MPI_REQUEST_NULL;
  check(MPI_Irecv(in.data(), static_cast<int>(in.size()), MPI_FLOAT, peer, recv_tag, comm_, &rreq), "MPI_Irecv",
        rop);
  check(MPI_Isend(out.data(), static_cast<int>(out.size()), MPI_FLOAT, peer, send_tag, comm_, &sreq), "MPI_Isend",
        sop);
  // Both are posted: waiting for one, then the other, cannot deadlock.
  const auto start = Clock::now();
  try {
    wait(&sreq, sop, 0.0);
  } catch (const CollectiveTimeout&) {
    MPI_Request_free(&rreq);  // the receive still completes into `in`, which must stay valid
    throw;
  }
  wait(&rreq, rop, std::chrono::duration<double>(Clock::now() - start).count());
}

}  // namespace olmo2::parallel
