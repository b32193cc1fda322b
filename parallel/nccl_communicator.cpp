// NcclCommunicator (parallel/nccl_communicator.h; docs/architecture.md §6).
#include "parallel/nccl_communicator.h"

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"
#include "ops/device_runtime.h"
#include "parallel/nccl_check.h"

namespace olmo2::parallel {

namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclMax; }

// Spin briefly (small collectives finish in microseconds), then sleep so that ranks
// sharing cores leave them to the peers they wait for (as MpiCommunicator does).
void pause(int polls, double waited) {
  if (polls < 32) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(waited < 1.0 ? 20 : 500));
  }
}

}  // namespace

ncclDataType_t NcclCommunicator::nccl_datatype(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::F64:
      return ncclFloat64;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::U8:
      return ncclUint8;
  }
  OLMO2_THROW(ShapeError, "no NCCL datatype for dtype ", static_cast<int>(dtype));
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<MpiCommunicator> group) : mpi_(std::move(group)) {
  if (!mpi_) OLMO2_THROW(Error, "NcclCommunicator: null MPI group communicator");
  gpu_ = ops::current_gpu();
  Op init;
  init.name = "nccl_init";
  init.sequence = mpi_->sequence() + 1;  // the id's broadcast below
  // Rank 0 makes the id; a flag byte says whether it could, so that a failure there
  // throws on every rank instead of leaving the others waiting in ncclCommInitRank.
  std::vector<std::byte> msg(1 + sizeof(ncclUniqueId));
  std::string failure;
  ncclUniqueId id{};
  if (rank() == 0) {
    try {
      OLMO2_NCCL_CHECK(ncclGetUniqueId(&id), nullptr, where(init));
      msg[0] = std::byte{1};
      std::memcpy(msg.data() + 1, &id, sizeof id);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  mpi_->broadcast(std::span<std::byte>(msg), 0);
  if (msg[0] != std::byte{1}) {
    if (!failure.empty()) OLMO2_THROW(Error, failure);
    OLMO2_THROW(Error, who(), ": group ", name(),
                "'s rank 0 could not make the NCCL unique id (its own message says why)");
  }
  std::memcpy(&id, msg.data() + 1, sizeof id);
  try {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call may return ncclInProgress; ncclCommAbort can end a hang
    config.commName = name().c_str();
    // NCCL allocates its buffers with cudaMalloc of its own, here and at the first
    // collectives: give the caching allocator's free segments back first, so that memory
    // we only cache cannot make NCCL fail (docs/architecture.md §2, "Device memory").
    ops::release_cached_gpu_memory();
    const auto start = Clock::now();
    OLMO2_NCCL_CHECK_ASYNC(ncclCommInitRankConfig(&comm_, size(), id, rank(), &config), comm_,
                           where(init));
    settle(init, start);
  } catch (...) {
    abort_comm();
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  const bool fired = watchdog_ && watchdog_->failure().has_value();
  watchdog_.reset();  // joins its thread: nothing touches comm_ or the events after this
  for (cudaEvent_t e : all_events_) cudaEventDestroy(e);
  if (fired) aborted_ = true;  // the watchdog aborted comm_
  if (!comm_ || aborted_) return;
  // Finalise (flushes the communicator's work), bounded, then free; abort when it hangs.
  const double limit = timeout_s() > 0 ? timeout_s() : 10.0;
  const auto start = Clock::now();
  ncclResult_t r = ncclCommFinalize(comm_);
  ncclResult_t state = r;
  for (int polls = 0; r == ncclSuccess || r == ncclInProgress; ++polls) {
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state != ncclInProgress) break;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited >= limit) break;
    pause(polls, waited);
  }
  if ((r == ncclSuccess || r == ncclInProgress) && state == ncclSuccess) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

std::string NcclCommunicator::who() const {
  return detail::concat("rank ", mpi_->world_rank(), " (", name(), " rank ", rank(), " of ", size(),
                        ")");
}

std::string NcclCommunicator::describe(const Op& op) const {
  if (op.name == "send_recv") {
    return detail::concat(op.name, " with ", name(), " rank ", op.peer, " (send tag ", op.tag,
                          ", recv tag ", op.tag2, ") on group ", name());
  }
  if (op.p2p) {
    return detail::concat(op.name, op.from ? " from " : " to ", name(), " rank ", op.peer, " (tag ",
                          op.tag, ") on group ", name());
  }
  return detail::concat(op.name, " #", op.sequence, " on group ", name());
}

std::string NcclCommunicator::details(const Op& op) const {
  if (op.name == "nccl_init") return "";
  std::string s = detail::concat(op.count, " ", dtype_name(op.dtype));
  if (op.name == "send_recv") {
    s = detail::concat(op.count, " ", dtype_name(op.dtype), " out, ", op.count2, " in");
  }
  if (op.p2p) s += detail::concat(", after collective #", op.sequence);
  return s;
}

std::string NcclCommunicator::pending() const {
  if (aborted_) return aborted_op_ + " (NCCL communicator aborted)";
  return mpi_->pending();
}

void NcclCommunicator::wait_pending() {
  if (aborted_) {
    OLMO2_THROW(Error, who(), ": ", aborted_op_,
                " cannot complete: the NCCL communicator was aborted (make the group again)");
  }
  mpi_->wait_pending();
}

NcclCommunicator::Op NcclCommunicator::begin(std::string name, const TensorView& data, bool p2p) {
  if (aborted_) {
    OLMO2_THROW(Error, who(), ": ", name, " refused: the NCCL communicator of group ", this->name(),
                " was aborted after ", aborted_op_, " (make the group again)");
  }
  throw_if_watchdog_failed();
  const std::string p = mpi_->pending();
  if (!p.empty()) {
    OLMO2_THROW(Error, who(), ": ", name, " refused: ", p,
                " timed out and is still pending (wait_pending() completes it)");
  }
  if (!first_collective_done_) {  // NCCL connects (and allocates) lazily, at first use
    ops::release_cached_gpu_memory();
    first_collective_done_ = true;
  }
  Op op;
  op.name = std::move(name);
  op.count = data.numel();
  op.dtype = data.dtype();
  op.p2p = p2p;
  op.sequence = p2p ? mpi_->sequence() : mpi_->count_collective();
  return op;
}

void NcclCommunicator::abort_comm() {
  // The watchdog's thread probes comm_: stop it first. If it fired, it aborted comm_.
  const bool fired = watchdog_ && watchdog_->failure().has_value();
  watchdog_.reset();
  if (comm_ && !aborted_ && !fired) ncclCommAbort(comm_);  // ends the communicator's kernels
  comm_ = nullptr;
  aborted_ = true;
}

void NcclCommunicator::abort_and_throw_timeout(const Op& op, double waited) {
  aborted_op_ = describe(op);
  abort_comm();
  const std::string d = details(op);
  throw CollectiveTimeout(detail::concat(who(), ": ", describe(op), " timed out after ",
                                         seconds(waited), " s", d.empty() ? "" : " (" + d + ")"),
                          op.name, name(), op.sequence, waited, __FILE__, __LINE__);
}

void NcclCommunicator::settle(const Op& op, Clock::time_point start) {
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    try {
      OLMO2_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), comm_, where(op));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        check_nccl(state, "ncclCommGetAsyncError (asynchronous error)", comm_, where(op), __FILE__,
                   __LINE__);
      }
    } catch (const Error&) {
      aborted_op_ = describe(op);
      abort_comm();  // NCCL requires an abort after an asynchronous error
      throw;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout_s() > 0 && waited >= timeout_s()) abort_and_throw_timeout(op, waited);
    pause(polls, waited);
  }
}

cudaEvent_t NcclCommunicator::take_event(const Op& op) {
  std::lock_guard<std::mutex> lock(watched_mu_);
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  OLMO2_COMM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), where(op));
  all_events_.push_back(e);
  return e;
}

void NcclCommunicator::watch(const Op& op, cudaStream_t stream) {
  if (watchdog_ && watchdog_timeout_ != timeout_s()) {
    watchdog_->wait_idle();  // the old limit still applies to what it watches
    throw_if_watchdog_failed();
    watchdog_.reset();
  }
  if (!watchdog_) {
    const int gpu = gpu_;
    ncclComm_t comm = comm_;
    watchdog_timeout_ = timeout_s();
    watchdog_ = std::make_unique<CompletionWatchdog>(
        watchdog_timeout_,
        // On its thread: end the hung kernels, so that stream waits return, and make
        // every later wait for the stream throw; the caller's next call on this
        // communicator throws CollectiveTimeout (throw_if_watchdog_failed).
        [comm, who = who()](const std::string& what, double waited, const std::string& error) {
          ncclCommAbort(comm);
          ops::record_gpu_failure(who + ": " + what +
                                  (error.empty() ? " timed out after " + seconds(waited) + " s" : " failed: " + error) +
                                  " (its NCCL communicator was aborted)");
        },
        [gpu] { cudaSetDevice(gpu); });  // the watchdog's thread queries this GPU's events
  }
  cudaEvent_t e = take_event(op);
  OLMO2_COMM_CUDA_CHECK(cudaEventRecord(e, stream), where(op));
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(watched_mu_);
    id = next_watch_id_++;
    watched_.emplace(id, op);
  }
  const std::string text = where(op);
  ncclComm_t comm = comm_;
  watchdog_->watch(id, describe(op), [this, e, id, comm, text]() -> bool {
    const cudaError_t q = cudaEventQuery(e);
    if (q == cudaSuccess) {
      std::lock_guard<std::mutex> lock(watched_mu_);
      watched_.erase(id);
      free_events_.push_back(e);
      return true;
    }
    if (q != cudaErrorNotReady) {
      cudaGetLastError();
      OLMO2_THROW(Error, "cudaEventQuery: ", cudaGetErrorName(q), ": ", cudaGetErrorString(q), " (", text, ")");
    }
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
      OLMO2_THROW(Error, "NCCL asynchronous error: ", ncclGetErrorString(state), " (", text, ")");
    }
    return false;
  });
}

void NcclCommunicator::throw_if_watchdog_failed() {
  if (!watchdog_ || aborted_) return;
  const std::optional<CompletionWatchdog::Failure> f = watchdog_->failure();
  if (!f) return;
  Op op;
  {
    std::lock_guard<std::mutex> lock(watched_mu_);
    auto it = watched_.find(f->id);
    if (it != watched_.end()) op = it->second;
  }
  aborted_op_ = f->what;
  aborted_ = true;  // comm_ was aborted by the watchdog: never used again
  comm_ = nullptr;
  if (!f->error.empty()) OLMO2_THROW(Error, who(), ": ", f->what, " failed on the GPU: ", f->error);
  const std::string d = details(op);
  throw CollectiveTimeout(detail::concat(who(), ": ", f->what, " timed out after ", seconds(f->waited_s), " s",
                                         d.empty() ? "" : " (" + d + ")"),
                          op.name, name(), op.sequence, f->waited_s, __FILE__, __LINE__);
}

template <typename Enqueue>
void NcclCommunicator::run(const Op& op, Stream stream, Enqueue&& enqueue) {
  cudaStream_t s = static_cast<cudaStream_t>(
      stream.handle ? stream.handle : ops::default_stream(Device::CUDA).handle);
  const auto start = Clock::now();
  enqueue(s);    // an OLMO2_NCCL_CHECK_ASYNC'd call (or group): may still be in progress
  settle(op, start);  // enqueued once the communicator's state leaves ncclInProgress
  if (timeout_s() > 0) watch(op, s);  // returns at once: the watchdog waits, not us
}

void NcclCommunicator::do_all_reduce(const TensorView& data, ReduceOp op, Stream stream) {
  if (data.device() == Device::CPU) return mpi_->all_reduce(data, op, stream);
  const Op o = begin(std::string("all_reduce_") + reduce_op_name(op), data, false);
  if (o.count == 0) return;
  run(o, stream, [&](cudaStream_t s) {
    OLMO2_NCCL_CHECK_ASYNC(ncclAllReduce(data.data(), data.data(), static_cast<size_t>(o.count),
                                         nccl_datatype(o.dtype), nccl_op(op), comm_, s),
                           comm_, where(o));
  });
}

void NcclCommunicator::do_all_gather(const TensorView& in, const TensorView& out, Stream stream) {
  if (in.device() == Device::CPU) return mpi_->all_gather(in, out, stream);
  const Op o = begin("all_gather", in, false);
  if (o.count == 0) return;
  run(o, stream, [&](cudaStream_t s) {
    OLMO2_NCCL_CHECK_ASYNC(ncclAllGather(in.data(), out.data(), static_cast<size_t>(o.count),
                                         nccl_datatype(o.dtype), comm_, s),
                           comm_, where(o));
  });
}

void NcclCommunicator::do_reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                                         Stream stream) {
  if (in.device() == Device::CPU) return mpi_->reduce_scatter(in, out, op, stream);
  const Op o = begin(std::string("reduce_scatter_") + reduce_op_name(op), out, false);
  if (o.count == 0) return;
  run(o, stream, [&](cudaStream_t s) {
    OLMO2_NCCL_CHECK_ASYNC(ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(o.count),
                                             nccl_datatype(o.dtype), nccl_op(op), comm_, s),
                           comm_, where(o));
  });
}

void NcclCommunicator::do_broadcast(const TensorView& data, int root, Stream stream) {
  if (data.device() == Device::CPU) return mpi_->broadcast(data, root, stream);
  const Op o = begin("broadcast", data, false);
  if (o.count == 0) return;
  run(o, stream, [&](cudaStream_t s) {
    OLMO2_NCCL_CHECK_ASYNC(ncclBroadcast(data.data(), data.data(), static_cast<size_t>(o.count),
                                         nccl_datatype(o.dtype), root, comm_, s),
                           comm_, where(o));
  });
}

// NCCL's send and receive carry no size: a receive posted for fewer elements than the
// peer sends would be written past its end. So each device message is announced by its
// element count, an int64 over the group's MPI side (same peer, same tag: MPI keeps them
// in order), and the receiver checks it before posting the device receive; a message of
// another size is received whole into scratch device memory of its own size, then
// refused naming both sizes (docs/architecture.md §6).
namespace {
[[noreturn]] void refuse_size(const std::string& who, int64_t got, int64_t want, DType dtype) {
  OLMO2_THROW(Error, who, " brought ", got, " ", dtype_name(dtype), ", expected ", want, " ", dtype_name(dtype),
              ": the ranks disagree on a shape (another --micro-batch, --seq-len or layout on one of them?)");
}
}  // namespace

void NcclCommunicator::do_send(const TensorView& data, int peer, int tag, Stream stream) {
  if (data.device() == Device::CPU) return mpi_->send(data, peer, tag, stream);
  const int64_t announced = data.numel();
  mpi_->send(std::span<const int64_t>(&announced, 1), peer, tag);
  Op o = begin("send", data, true);
  o.peer = peer, o.tag = tag;
  if (o.count == 0) return;
  run(o, stream, [&](cudaStream_t s) {
    OLMO2_NCCL_CHECK_ASYNC(ncclSend(data.data(), static_cast<size_t>(o.count),
                                    nccl_datatype(o.dtype), peer, comm_, s),
                           comm_, where(o));
  });
}

void NcclCommunicator::do_recv(const TensorView& data, int peer, int tag, Stream stream) {
  if (data.device() == Device::CPU) return mpi_->recv(data, peer, tag, stream);
  int64_t announced = 0;
  mpi_->recv(std::span<int64_t>(&announced, 1), peer, tag);
  Op o = begin("recv", data, true);
  o.peer = peer, o.tag = tag, o.from = true;
  Tensor scratch;  // a message of another size lands here, never in `data`
  if (announced != o.count) {
    o.count = announced;
    scratch = Tensor::zeros({std::max<int64_t>(announced, 1)}, data.dtype(), data.device());
  }
  void* into = scratch.empty() ? data.data() : scratch.view().data();
  if (o.count > 0) {
    run(o, stream, [&](cudaStream_t s) {
      OLMO2_NCCL_CHECK_ASYNC(ncclRecv(into, static_cast<size_t>(o.count), nccl_datatype(o.dtype), peer, comm_, s),
                             comm_, where(o));
    });
  }
  if (!scratch.empty()) refuse_size(where(o), announced, data.numel(), data.dtype());
}

void NcclCommunicator::do_send_recv(const TensorView& out, const TensorView& in, int peer,
                                    int send_tag, int recv_tag, Stream stream) {
  if (out.device() == Device::CPU) {
    return mpi_->send_recv(out, in, peer, send_tag, recv_tag, stream);
  }
  // The sizes first (announce ours, learn the peer's), so the receive is posted for
  // what really comes.
  const int64_t mine = out.numel();
  int64_t announced = 0;
  mpi_->send_recv(host_view(std::span<const int64_t>(&mine, 1)), host_view(std::span<int64_t>(&announced, 1)), peer,
                  send_tag, recv_tag);
  Op o = begin("send_recv", out, true);
  o.peer = peer, o.tag = send_tag, o.tag2 = recv_tag, o.count2 = in.numel();
  Tensor scratch;  // a message of another size lands here, never in `in`
  if (announced != o.count2) {
    o.count2 = announced;
    scratch = Tensor::zeros({std::max<int64_t>(announced, 1)}, in.dtype(), in.device());
  }
  void* into = scratch.empty() ? in.data() : scratch.view().data();
  if (o.count == 0 && o.count2 == 0) {
    // Nothing travels, but a receive that expected elements and got none is still refused.
    if (!scratch.empty()) refuse_size(where(o), announced, in.numel(), in.dtype());
    return;
  }
  const ncclDataType_t type = nccl_datatype(o.dtype);
  run(o, stream, [&](cudaStream_t s) {
    // Both halves in one group: NCCL posts them together, so two ranks exchanging with
    // each other cannot deadlock whatever the sizes.
    OLMO2_NCCL_CHECK(ncclGroupStart(), comm_, where(o));
    ncclResult_t sent = ncclSuccess, received = ncclSuccess;
    if (o.count > 0) sent = ncclSend(out.data(), static_cast<size_t>(o.count), type, peer, comm_, s);
    if (o.count2 > 0) received = ncclRecv(into, static_cast<size_t>(o.count2), type, peer, comm_, s);
    const ncclResult_t ended = ncclGroupEnd();  // always closes the group, even after a failure
    OLMO2_NCCL_CHECK_ASYNC(sent, comm_, where(o));
    OLMO2_NCCL_CHECK_ASYNC(received, comm_, where(o));
    OLMO2_NCCL_CHECK_ASYNC(ended, comm_, where(o));
  });
  if (!scratch.empty()) refuse_size(where(o), announced, in.numel(), in.dtype());
}

}  // namespace olmo2::parallel
