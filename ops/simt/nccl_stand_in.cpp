// The NCCL stand-in (ops/simt/include/nccl.h) over MPI (docs/architecture.md §10). Each
// call first runs what its stream queued before it (so the data is there), then posts
// non-blocking MPI operations at once — as a GPU would start them without its host — and
// queues their completion on the stream, run by the thread that may call MPI. Point to
// point messages carry a header (sequence number, count, type), so a send that meets a
// receive of another size or type, or a send no receive takes, is reported as NCCL's
// asynchronous error instead of a hang or silent corruption.
#include <nccl.h>
#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ops/simt/bf16_bits.h"
#include "ops/simt/cuda_runtime_stand_in.h"

struct ncclComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, nranks = 0;
  std::atomic<int> async{ncclSuccess};
  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::string last_error;
  std::vector<uint64_t> sends, recvs;  // per peer: how many sends to / receives from it so far
  // ncclCommFinalize's handshake while in progress: a token to and from every peer.
  std::vector<MPI_Request> finalize;
  std::vector<int> finalize_tokens;
};

namespace {

constexpr uint64_t kIdMagic = 0x6e63636c73696d74ull;  // "ncclsimt"
constexpr int kInitTag = 24000, kHeaderTag = 1, kDataTag = 2, kFinalizeTag = 3;
thread_local int t_group_depth = 0;
std::mutex g_error_mu;
std::string g_last_error;

struct IdBody {
  uint64_t magic;
  int32_t world_rank;
  uint32_t counter;
};

double timeout_s() {
  const char* s = std::getenv("OLMO2_SIMT_NCCL_TIMEOUT");
  return s && *s ? std::atof(s) : 60.0;
}

ncclResult_t fail(ncclComm* c, ncclResult_t r, const std::string& what) {
  std::fprintf(stderr, "NCCL stand-in: %s\n", what.c_str());
  if (c) {
    std::lock_guard lock(c->mu);
    if (c->last_error.empty()) c->last_error = what;
    int expected = ncclSuccess;
    c->async.compare_exchange_strong(expected, r);
  }
  std::lock_guard lock(g_error_mu);
  g_last_error = what;
  return r;
}

MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclFloat16:
    case ncclBfloat16: return MPI_UINT16_T;  // moved as bits; reduced through f32
  }
  return MPI_DATATYPE_NULL;
}
size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
  }
}
MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
    case ncclAvg: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

bool usable(ncclComm* c) { return c != nullptr && !c->aborted.load() && c->async.load() == ncclSuccess; }

thread_local bool t_group_settled = false;

/// Runs what `stream` queued before this call, so the operation reads finished data.
/// Within a group only before its first operation: the group's operations do not depend
/// on each other, and settling a send's completion before posting the receive the peer's
/// send waits for would deadlock.
ncclResult_t settle_stream(ncclComm* c, cudaStream_t stream) {
  if (t_group_depth > 0) {
    if (t_group_settled) return ncclSuccess;
    t_group_settled = true;
  }
  if (olmo2::simt::synchronize_stream(stream) != cudaSuccess)
    return fail(c, ncclUnhandledCudaError, "a kernel before this NCCL call failed (cudaGetLastError says which)");
  return ncclSuccess;
}

/// Waits for `reqs` on the MPI thread, polling so that an abort or a message that never
/// comes ends it: then the communicator gets `on_timeout` as its asynchronous error.
void complete(ncclComm* c, std::vector<MPI_Request> reqs, const std::string& what, const std::function<void()>& after) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    if (MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
      fail(c, ncclSystemError, what + ": MPI failed");
      return;
    }
    if (done) break;
    if (c->aborted.load()) return;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s()) {
      fail(c, ncclRemoteError, what + ": did not complete in " + std::to_string(timeout_s()) +
                                   " s (a peer never made the matching call)");
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (after) after();
}

ncclResult_t start(ncclComm* c, cudaStream_t stream, std::vector<MPI_Request> reqs, std::string what,
                   std::function<void()> after = {}) {
  olmo2::simt::enqueue_on_mpi_thread(stream, [c, reqs = std::move(reqs), what = std::move(what), after = std::move(after)] {
    complete(c, reqs, what, after);
  });
  return ncclSuccess;
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t c) {
  static thread_local std::string text;
  if (c) {
    std::lock_guard lock(c->mu);
    text = c->last_error;
  } else {
    std::lock_guard lock(g_error_mu);
    text = g_last_error;
  }
  return text.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<uint32_t> counter{0};
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  *id = ncclUniqueId{};
  const IdBody body{kIdMagic, world, counter.fetch_add(1)};
  std::memcpy(id->internal, &body, sizeof body);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  return ncclCommInitRankConfig(comm, nranks, id, rank, &config);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* /*config: blocking or not, the stand-in completes on the stream*/) {
  *comm = nullptr;
  IdBody body;
  std::memcpy(&body, id.internal, sizeof body);
  if (body.magic != kIdMagic) return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: not an id of ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  olmo2::simt::set_mpi_thread();
  // Every member tells the id's maker its world rank; the maker answers with the table.
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  const int tag = kInitTag + static_cast<int>(body.counter % 4096);
  int mine[3] = {rank, world, nranks};
  MPI_Request sent;
  MPI_Isend(mine, 3, MPI_INT, body.world_rank, tag, MPI_COMM_WORLD, &sent);
  std::vector<int> table(static_cast<size_t>(nranks), -1);
  if (world == body.world_rank) {
    for (int i = 0; i < nranks; ++i) {
      int got[3];
      MPI_Recv(got, 3, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (got[2] != nranks || got[0] < 0 || got[0] >= nranks || table[static_cast<size_t>(got[0])] != -1)
        return fail(nullptr, ncclInvalidUsage, "ncclCommInitRank: world rank " + std::to_string(got[1]) + " joined as rank " +
                                                   std::to_string(got[0]) + " of " + std::to_string(got[2]) +
                                                   ", this communicator has " + std::to_string(nranks));
      table[static_cast<size_t>(got[0])] = got[1];
    }
    for (int w : table) MPI_Send(table.data(), nranks, MPI_INT, w, tag + 1, MPI_COMM_WORLD);
  }
  MPI_Recv(table.data(), nranks, MPI_INT, body.world_rank, tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Wait(&sent, MPI_STATUS_IGNORE);
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, nranks, table.data(), &group);
  auto c = std::make_unique<ncclComm>();
  MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &c->comm);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  c->rank = rank;
  c->nranks = nranks;
  c->sends.assign(static_cast<size_t>(nranks), 0);
  c->recvs.assign(static_cast<size_t>(nranks), 0);
  *comm = c.release();
  return ncclSuccess;
}

namespace {
/// Once every peer has finalised, every message sent to this rank has arrived: each must
/// have been taken by a receive. ncclSuccess, or ncclInvalidUsage naming the sender.
ncclResult_t check_no_stray_send(ncclComm* c) {
  int stray = 0;
  MPI_Status st;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->comm, &stray, &st);
  if (!stray) return ncclSuccess;
  return fail(c, ncclInvalidUsage, "rank " + std::to_string(st.MPI_SOURCE) + " sent rank " + std::to_string(c->rank) +
                                       " a message that no ncclRecv took (a send without its receive)");
}
}  // namespace

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* state) {
  if (c == nullptr) return ncclInvalidArgument;
  *state = static_cast<ncclResult_t>(c->async.load());
  if (*state != ncclSuccess || c->finalize.empty()) return ncclSuccess;
  // A finalisation in progress (called on the thread that finalised: the MPI thread).
  int done = 0;
  if (MPI_Testall(static_cast<int>(c->finalize.size()), c->finalize.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
    *state = fail(c, ncclSystemError, "ncclCommFinalize: MPI failed");
  } else if (!done) {
    *state = ncclInProgress;
  } else {
    c->finalize.clear();
    *state = check_no_stray_send(c);
  }
  return ncclSuccess;
}

// Non-blocking, as NCCL's with config.blocking = 0: it returns ncclInProgress, and
// ncclCommGetAsyncError says when every peer has finalised too. A peer that failed or
// aborted never does, so the caller's bounded wait ends in an abort, where a blocking
// barrier would hang this rank. The handshake is point to point on its own tag: a
// collective could be matched with one an aborted peer left pending.
ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (c == nullptr) return ncclInvalidArgument;
  if (c->aborted.load()) return fail(c, ncclInvalidUsage, "ncclCommFinalize after ncclCommAbort");
  if (c->async.load() != ncclSuccess) return static_cast<ncclResult_t>(c->async.load());
  if (!c->finalize.empty()) return ncclInProgress;
  c->finalize_tokens.assign(static_cast<size_t>(c->nranks), c->rank);
  for (int peer = 0; peer < c->nranks; ++peer) {
    if (peer == c->rank) continue;
    c->finalize.emplace_back();
    MPI_Irecv(&c->finalize_tokens[static_cast<size_t>(peer)], 1, MPI_INT, peer, kFinalizeTag, c->comm, &c->finalize.back());
    c->finalize.emplace_back();
    MPI_Isend(&c->rank, 1, MPI_INT, peer, kFinalizeTag, c->comm, &c->finalize.back());
  }
  return c->finalize.empty() ? check_no_stray_send(c) : ncclInProgress;  // one rank: nothing to wait for
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (c == nullptr) return ncclSuccess;
  if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  delete c;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (c == nullptr) return ncclSuccess;
  // Pending completions see the flag and stop; the MPI communicator is left to MPI's end.
  c->aborted.store(true);
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group_depth == 0) t_group_settled = false;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t stream) {
  if (!usable(c)) return c ? static_cast<ncclResult_t>(c->async.load()) : ncclInvalidArgument;
  if (ncclResult_t r = settle_stream(c, stream); r != ncclSuccess) return r;
  const int n = c->nranks;
  if (type == ncclBfloat16) {  // summed in f32, rounded once, as NCCL's bf16 reduction
    auto wide = std::make_shared<std::vector<float>>(count);
    for (size_t i = 0; i < count; ++i) (*wide)[i] = olmo2::simt::bf16_widen_bits(static_cast<const uint16_t*>(send)[i]);
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, wide->data(), static_cast<int>(count), MPI_FLOAT, mpi_op(op), c->comm, &req);
    return start(c, stream, {req}, "ncclAllReduce (bf16)", [wide, recv, count, op, n] {
      for (size_t i = 0; i < count; ++i)
        static_cast<uint16_t*>(recv)[i] = olmo2::simt::bf16_round_bits(op == ncclAvg ? (*wide)[i] / static_cast<float>(n) : (*wide)[i]);
    });
  }
  if (type == ncclFloat16) return fail(c, ncclInvalidArgument, "ncclAllReduce of float16: not in the stand-in");
  MPI_Request req;
  MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), mpi_type(type), mpi_op(op), c->comm,
                 &req);
  return start(c, stream, {req}, "ncclAllReduce", [recv, count, type, op, n] {
    if (op != ncclAvg) return;
    if (type == ncclFloat32) for (size_t i = 0; i < count; ++i) static_cast<float*>(recv)[i] /= static_cast<float>(n);
    if (type == ncclFloat64) for (size_t i = 0; i < count; ++i) static_cast<double*>(recv)[i] /= n;
  });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t stream) {
  if (!usable(c)) return c ? static_cast<ncclResult_t>(c->async.load()) : ncclInvalidArgument;
  if (ncclResult_t r = settle_stream(c, stream); r != ncclSuccess) return r;
  if (type == ncclFloat16 || op == ncclAvg)
    return fail(c, ncclInvalidArgument, "ncclReduceScatter of float16 or an average: not in the stand-in");
  if (type == ncclBfloat16) {  // reduced in f32, rounded once
    const size_t total = recv_count * static_cast<size_t>(c->nranks);
    auto wide = std::make_shared<std::vector<float>>(total);
    auto out = std::make_shared<std::vector<float>>(recv_count);
    for (size_t i = 0; i < total; ++i) (*wide)[i] = olmo2::simt::bf16_widen_bits(static_cast<const uint16_t*>(send)[i]);
    MPI_Request req;
    MPI_Ireduce_scatter_block(wide->data(), out->data(), static_cast<int>(recv_count), MPI_FLOAT, mpi_op(op), c->comm,
                              &req);
    return start(c, stream, {req}, "ncclReduceScatter (bf16)", [wide, out, recv, recv_count] {
      for (size_t i = 0; i < recv_count; ++i) static_cast<uint16_t*>(recv)[i] = olmo2::simt::bf16_round_bits((*out)[i]);
    });
  }
  // MPI reads the whole send buffer; NCCL allows recv inside it (in place).
  auto copy = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(send),
                                                            static_cast<const unsigned char*>(send) +
                                                                recv_count * c->nranks * type_bytes(type));
  MPI_Request req;
  MPI_Ireduce_scatter_block(copy->data(), recv, static_cast<int>(recv_count), mpi_type(type), mpi_op(op), c->comm, &req);
  return start(c, stream, {req}, "ncclReduceScatter", [copy] {});
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type, ncclComm_t c,
                           cudaStream_t stream) {
  if (!usable(c)) return c ? static_cast<ncclResult_t>(c->async.load()) : ncclInvalidArgument;
  if (ncclResult_t r = settle_stream(c, stream); r != ncclSuccess) return r;
  const size_t bytes = send_count * type_bytes(type);
  const bool in_place = send == static_cast<const unsigned char*>(recv) + bytes * static_cast<size_t>(c->rank);
  MPI_Request req;
  MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(send_count), mpi_type(type), recv,
                 static_cast<int>(send_count), mpi_type(type), c->comm, &req);
  return start(c, stream, {req}, "ncclAllGather");
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t c,
                           cudaStream_t stream) {
  if (!usable(c)) return c ? static_cast<ncclResult_t>(c->async.load()) : ncclInvalidArgument;
  if (root < 0 || root >= c->nranks) return fail(c, ncclInvalidArgument, "ncclBroadcast: root " + std::to_string(root));
  if (ncclResult_t r = settle_stream(c, stream); r != ncclSuccess) return r;
  if (c->rank == root && send != recv) std::memmove(recv, send, count * type_bytes(type));
  MPI_Request req;
  MPI_Ibcast(recv, static_cast<int>(count), mpi_type(type), root, c->comm, &req);
  return start(c, stream, {req}, "ncclBroadcast");
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t c, cudaStream_t stream) {
  if (!usable(c)) return c ? static_cast<ncclResult_t>(c->async.load()) : ncclInvalidArgument;
  if (peer < 0 || peer >= c->nranks) return fail(c, ncclInvalidArgument, "ncclSend: peer " + std::to_string(peer));
  if (ncclResult_t r = settle_stream(c, stream); r != ncclSuccess) return r;
  const uint64_t seq = c->sends[static_cast<size_t>(peer)]++;
  auto header = std::make_shared<std::array<uint64_t, 3>>(std::array<uint64_t, 3>{seq, count, static_cast<uint64_t>(type)});
  std::vector<MPI_Request> reqs(2);
  MPI_Isend(header->data(), 3, MPI_UINT64_T, peer, kHeaderTag, c->comm, &reqs[0]);
  MPI_Isend(send, static_cast<int>(count * type_bytes(type)), MPI_BYTE, peer, kDataTag, c->comm, &reqs[1]);
  return start(c, stream, std::move(reqs),
               "ncclSend #" + std::to_string(seq) + " of " + std::to_string(count) + " elements to rank " + std::to_string(peer),
               [header] {});
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t c, cudaStream_t stream) {
  if (!usable(c)) return c ? static_cast<ncclResult_t>(c->async.load()) : ncclInvalidArgument;
  if (peer < 0 || peer >= c->nranks) return fail(c, ncclInvalidArgument, "ncclRecv: peer " + std::to_string(peer));
  if (ncclResult_t r = settle_stream(c, stream); r != ncclSuccess) return r;
  const uint64_t seq = c->recvs[static_cast<size_t>(peer)]++;
  auto header = std::make_shared<std::array<uint64_t, 3>>();
  // The data lands in a buffer of its own, copied only when the header matches: a send of
  // another size never writes past `recv`.
  auto landing = std::make_shared<std::vector<unsigned char>>(count * type_bytes(type));
  std::vector<MPI_Request> reqs(2);
  MPI_Irecv(header->data(), 3, MPI_UINT64_T, peer, kHeaderTag, c->comm, &reqs[0]);
  MPI_Irecv(landing->data(), static_cast<int>(landing->size()), MPI_BYTE, peer, kDataTag, c->comm, &reqs[1]);
  const std::string what = "ncclRecv #" + std::to_string(seq) + " of " + std::to_string(count) + " elements from rank " +
                           std::to_string(peer);
  return start(c, stream, std::move(reqs), what, [c, header, landing, recv, count, type, seq, what] {
    const auto& h = *header;
    if (h[0] != seq || h[1] != count || h[2] != static_cast<uint64_t>(type)) {
      fail(c, ncclInvalidUsage, what + " met the peer's send #" + std::to_string(h[0]) + " of " + std::to_string(h[1]) +
                                    " elements of type " + std::to_string(h[2]) + " (sends and receives out of step)");
      return;
    }
    std::memcpy(recv, landing->data(), landing->size());
  });
}
