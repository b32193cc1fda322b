// Communicator: the collectives and point-to-point messages of one process group,
// independent of the transport (MPI for host tensors and bootstrap, NCCL for device
// ones), typed by the tensor views they carry (docs/architecture.md §6 (communicators)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>

#include "core/error.h"
#include "ops/device.h"
#include "ops/dtype.h"
#include "ops/tensor.h"

namespace olmo2::parallel {

/// The reductions of all_reduce and reduce_scatter.
enum class ReduceOp : uint8_t { Sum, Max };

/// "sum" or "max", for messages and operation names ("all_reduce_" + name).
const char* reduce_op_name(ReduceOp op);

/// A collective or message that did not complete within the communicator's timeout.
/// what() says where every rank stands and what was being moved, e.g.
/// "rank 0 (tp rank 0 of 2): all_reduce_sum #3 on group tp timed out after 2.0 s (1024 f32)".
/// The operation stays posted (MPI cannot cancel a collective): its buffers must stay
/// valid until Communicator::wait_pending() completes it, or the job is aborted.
class CollectiveTimeout : public Error {
 public:
  CollectiveTimeout(const std::string& message, std::string op, std::string group,
                    uint64_t sequence, double waited_s, const char* file, int line)
      : Error(message, file, line),
        op_(std::move(op)),
        group_(std::move(group)),
        sequence_(sequence),
        waited_s_(waited_s) {}
  /// The operation: "all_reduce_sum", "barrier", "send", ...
  const std::string& op() const { return op_; }
  /// The group's name: "world", "tp", "dp", "pp".
  const std::string& group() const { return group_; }
  /// The collective's sequence number (for send/recv: the collectives issued before it).
  uint64_t sequence() const { return sequence_; }
  /// Seconds waited before giving up.
  double waited_s() const { return waited_s_; }

 private:
  std::string op_, group_;
  uint64_t sequence_;
  double waited_s_;
};

/// A collective started without waiting for it (Communicator::all_gather_start): wait()
/// returns once it is complete on this rank (its output written, its input free to
/// reuse). Move-only. A default-constructed handle is complete. Destroying a handle
/// that was not waited for waits for it (errors ignored), since MPI cannot cancel a
/// collective and its buffers must outlive it.
class AsyncHandle {
 public:
  AsyncHandle() = default;
  /// A pending operation that `finish` completes (called once, by wait()).
  explicit AsyncHandle(std::function<void()> finish) : finish_(std::move(finish)) {}
  /// A pending operation that `finish` completes and `test` progresses: test() returns
  /// true once the operation is complete on this rank (it never throws a timeout).
  AsyncHandle(std::function<void()> finish, std::function<bool()> test)
      : finish_(std::move(finish)), test_(std::move(test)) {}
  AsyncHandle(AsyncHandle&& other) noexcept
      : finish_(std::exchange(other.finish_, nullptr)), test_(std::exchange(other.test_, nullptr)) {}
  AsyncHandle& operator=(AsyncHandle&& other) noexcept;
  AsyncHandle(const AsyncHandle&) = delete;
  AsyncHandle& operator=(const AsyncHandle&) = delete;
  ~AsyncHandle();
  /// Blocks until the operation completes; throws what the blocking call would
  /// (CollectiveTimeout after the communicator's timeout, the operation then pending as
  /// Communicator::pending() says; Error on a transport failure). Then, or when already
  /// complete, a no-op.
  void wait();
  /// True until wait() has been called on a pending operation.
  bool pending() const { return static_cast<bool>(finish_); }
  /// Lets the transport progress the operation without blocking (MpiCommunicator:
  /// MPI_Test; Open MPI advances its non-blocking collectives on a CPU only inside MPI
  /// calls, docs/architecture.md §7 "Overlap") and returns true when it is complete
  /// (wait() then returns at once). A handle without a test function (the blocking
  /// fallback's, or one made from `finish` alone) answers !pending(). Throws Error on a
  /// transport failure; never a timeout.
  bool test();

 private:
  std::function<void()> finish_;
  std::function<bool()> test_;
};

/// One process group. Every member must issue the same collectives in the same order
/// with matching dtypes and element counts (as in MPI and NCCL); sequence() counts them
/// so that a hang can be located.
///
/// The public calls are non-virtual: they check the call, then hand it to the
/// implementation's protected do_* function (docs/architecture.md §6 (communicators)).
/// Checked up front, before anything is posted or counted, each a ShapeError naming
/// the operation, the group and the offending values:
///  - every view is dense (contiguous, row-major) and non-null when it holds elements;
///  - its device is one the implementation carries (supports(); MpiCommunicator: CPU
///    only) and the stream's device is the view's;
///  - in and out have the same dtype and the element counts the operation needs, and do
///    not overlap;
///  - reductions (Sum, Max) take f32, bf16, f64, i32, i64 or u8, not f16; moving
///    operations take every dtype;
///  - roots and peers are group ranks, a peer is not this rank, tags are in
///    [0, tag_limit()].
/// Integer sums wrap (two's complement, u8 modulo 256) as MPI and NCCL do; bf16 is
/// reduced in f32 and rounded to nearest even after each addition, so with more than
/// two ranks a bf16 sum may depend on the transport's reduction order.
///
/// On the CPU every call but the *_start ones blocks until the operation completes
/// locally, or throws CollectiveTimeout after timeout_s() seconds (0 = wait forever). A
/// CUDA stream (for an implementation that carries device views) orders the operation
/// on that stream and the call may return before it is done. A transport failure throws Error. Not
/// thread-safe: one thread per communicator.
class Communicator {
 public:
  virtual ~Communicator() = default;

  /// This process's rank in the group, in [0, size()).
  virtual int rank() const = 0;
  /// Number of ranks in the group.
  virtual int size() const = 0;
  /// The group's name for messages: "world", "tp", "dp" or "pp".
  virtual const std::string& name() const = 0;
  /// Number of collectives issued so far on this communicator (send/recv not counted);
  /// the k-th collective is reported as "#k". Equal on every member between collectives.
  virtual uint64_t sequence() const = 0;
  /// Seconds a call waits before throwing CollectiveTimeout; 0 = forever.
  virtual double timeout_s() const = 0;
  /// Sets timeout_s(); InputError when seconds < 0.
  virtual void set_timeout(double seconds) = 0;
  /// True when views on `device` can be passed (MpiCommunicator: CPU only).
  virtual bool supports(Device device) const = 0;
  /// The largest message tag accepted (the transport's limit, at least 32767).
  virtual int tag_limit() const = 0;

  // ---- Typed collectives: a dense view of any supported dtype (see the class note). --

  /// In place: data[i] = op over ranks of data[i]. Same dtype and element count on every
  /// rank.
  void all_reduce(const TensorView& data, ReduceOp op, Stream stream = {});
  /// out = concatenation of every rank's `in`, rank-major: out[r·n + i] = in_r[i], with
  /// n = in.numel(). out.numel() must be size()·n, out.dtype() in.dtype(); in and out
  /// must not overlap. Shapes are not checked beyond element counts.
  void all_gather(const TensorView& in, const TensorView& out, Stream stream = {});
  /// all_gather posted without waiting for it: `out` holds the result once the returned
  /// handle's wait() returns; until then `in` must not change and neither buffer may be
  /// freed. Same checks and errors as all_gather (checked before anything is posted).
  /// Several collectives, started or blocking, may be outstanding on one communicator;
  /// every member must post them in the same order (MPI's rule for non-blocking
  /// collectives). MpiCommunicator posts MPI_Iallgather (progressed by Open MPI inside
  /// later MPI calls on this rank); the default implementation runs the blocking
  /// all_gather and returns a complete handle. What the ZeRO-3 prefetch uses
  /// (docs/architecture.md §7 "ZeRO stages").
  AsyncHandle all_gather_start(const TensorView& in, const TensorView& out, Stream stream = {});
  /// all_reduce posted without waiting for it: `data` holds the result once the handle's
  /// wait() returns; until then `data` must not be read, written or freed. Same checks
  /// and errors as all_reduce (before anything is posted); the ordering rule of
  /// all_gather_start. MpiCommunicator posts MPI_Iallreduce, the same call the blocking
  /// all_reduce makes, so a started and a blocking reduction of the same data give the
  /// same bits; the default runs the blocking all_reduce and returns a complete handle.
  /// What the overlapped DP gradient reduction uses (docs/architecture.md §7 "Overlap").
  AsyncHandle all_reduce_start(const TensorView& data, ReduceOp op, Stream stream = {});
  /// out[i] = op over ranks r of in_r[rank()·n + i], with n = out.numel(); in.numel() must
  /// be size()·n, in.dtype() out.dtype(); in and out must not overlap.
  void reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                      Stream stream = {});
  /// reduce_scatter posted without waiting for it: `out` holds the result once the
  /// handle's wait() returns; until then `in` must not change and neither buffer may be
  /// freed. Same checks and errors as reduce_scatter; the ordering rule of
  /// all_gather_start. MpiCommunicator posts MPI_Ireduce_scatter_block (as the blocking
  /// call does: the same bits); the default runs the blocking call and returns a
  /// complete handle. ZeRO-2/3's gradient reduce-scatter (docs/architecture.md §7 "Overlap").
  AsyncHandle reduce_scatter_start(const TensorView& in, const TensorView& out, ReduceOp op,
                                   Stream stream = {});
  /// data on every rank = data on `root` (a group rank in [0, size())).
  void broadcast(const TensorView& data, int root, Stream stream = {});
  /// Sends `data` to group rank `peer` (≠ rank()) with `tag` (in [0, tag_limit()]);
  /// returns once the buffer may be reused, which for large messages means the peer has
  /// posted the matching recv. The receiver must expect the same dtype.
  void send(const TensorView& data, int peer, int tag, Stream stream = {});
  /// Receives exactly data.numel() elements of data.dtype() from group rank `peer` with
  /// `tag`; a message of another element count throws Error.
  void recv(const TensorView& data, int peer, int tag, Stream stream = {});
  /// Sends `out` to group rank `peer` with `send_tag` and receives exactly in.numel()
  /// elements from the same peer with `recv_tag`, both posted at once, so two ranks that
  /// exchange with each other cannot deadlock whatever the message sizes (what a
  /// pipeline stage does when it sends an activation forward and receives a gradient
  /// back: Megatron's send_forward_recv_backward). `out` and `in` have the same dtype and
  /// device and must not overlap. On a timeout the unfinished half stays posted
  /// (pending()).
  void send_recv(const TensorView& out, const TensorView& in, int peer, int send_tag,
                 int recv_tag, Stream stream = {});
  /// send posted without waiting for it: `data` must not change nor be freed until the
  /// returned handle's wait() returns. Same checks and errors as send (before anything
  /// is posted). MpiCommunicator posts MPI_Isend; the default runs the blocking send and
  /// returns a complete handle. What the pipeline schedule posts early and waits for
  /// late (docs/architecture.md §5 "Interleaved 1F1B", §6 (communicators)).
  AsyncHandle send_start(const TensorView& data, int peer, int tag, Stream stream = {});
  /// recv to be completed later: `data` holds the message once the handle's wait()
  /// returns (which throws what recv throws: Error for a message of another element
  /// count, CollectiveTimeout); until then it must not be read, written or freed.
  /// Messages from one peer with one tag match the receives in the order they are
  /// waited for. The default — MpiCommunicator's too — runs the blocking recv in wait(),
  /// not at once as the other defaults do: a receive posted ahead of the computation
  /// whose result the peer waits for must not block that computation. MpiCommunicator
  /// does not post MPI_Irecv because Open MPI 4's single-copy (CMA) path writes a longer
  /// message than expected past the receive buffer (AddressSanitizer in
  /// train_message_sizes_test); its recv checks the size by MPI_Improbe first.
  AsyncHandle recv_start(const TensorView& data, int peer, int tag, Stream stream = {});
  /// Blocks until every member has entered the barrier.
  void barrier();

  // ---- Host-span conveniences: all_reduce/all_gather/... on a 1-d CPU view of the
  // span (dtype from the element type; std::byte is u8; uint64_t moves as i64 words, bit
  // for bit, and has no reductions). Explicit overloads, not templates, so that a
  // std::vector<T>& converts implicitly. Same contract and errors as the typed calls.

  /// all_reduce(data, Sum).
  void all_reduce_sum(std::span<float> data);
  void all_reduce_sum(std::span<double> data);
  void all_reduce_sum(std::span<int32_t> data);
  void all_reduce_sum(std::span<int64_t> data);
  void all_reduce_sum(std::span<uint8_t> data);
  /// all_reduce(data, Max).
  void all_reduce_max(std::span<float> data);
  void all_reduce_max(std::span<double> data);
  void all_reduce_max(std::span<int32_t> data);
  void all_reduce_max(std::span<int64_t> data);
  void all_reduce_max(std::span<uint8_t> data);
  /// all_gather(in, out): out.size() == size()·in.size().
  void all_gather(std::span<const float> in, std::span<float> out);
  void all_gather(std::span<const double> in, std::span<double> out);
  void all_gather(std::span<const int32_t> in, std::span<int32_t> out);
  void all_gather(std::span<const int64_t> in, std::span<int64_t> out);
  void all_gather(std::span<const uint8_t> in, std::span<uint8_t> out);
  void all_gather(std::span<const uint64_t> in, std::span<uint64_t> out);
  /// reduce_scatter(in, out, Sum): in.size() == size()·out.size().
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out);
  void reduce_scatter_sum(std::span<const double> in, std::span<double> out);
  void reduce_scatter_sum(std::span<const int32_t> in, std::span<int32_t> out);
  void reduce_scatter_sum(std::span<const int64_t> in, std::span<int64_t> out);
  void reduce_scatter_sum(std::span<const uint8_t> in, std::span<uint8_t> out);
  /// broadcast(data, root).
  void broadcast(std::span<float> data, int root);
  void broadcast(std::span<double> data, int root);
  void broadcast(std::span<int32_t> data, int root);
  void broadcast(std::span<int64_t> data, int root);
  void broadcast(std::span<uint8_t> data, int root);
  void broadcast(std::span<uint64_t> data, int root);
  void broadcast(std::span<std::byte> data, int root);
  /// send(data, peer, tag).
  void send(std::span<const float> data, int peer, int tag);
  void send(std::span<const double> data, int peer, int tag);
  void send(std::span<const int32_t> data, int peer, int tag);
  void send(std::span<const int64_t> data, int peer, int tag);
  void send(std::span<const uint8_t> data, int peer, int tag);
  void send(std::span<const uint64_t> data, int peer, int tag);
  void send(std::span<const std::byte> data, int peer, int tag);
  /// recv(data, peer, tag): exactly data.size() elements.
  void recv(std::span<float> data, int peer, int tag);
  void recv(std::span<double> data, int peer, int tag);
  void recv(std::span<int32_t> data, int peer, int tag);
  void recv(std::span<int64_t> data, int peer, int tag);
  void recv(std::span<uint8_t> data, int peer, int tag);
  void recv(std::span<uint64_t> data, int peer, int tag);
  void recv(std::span<std::byte> data, int peer, int tag);
  /// send_recv(out, in, peer, send_tag, recv_tag) of f32 (pipeline activations).
  void send_recv(std::span<const float> out, std::span<float> in, int peer, int send_tag,
                 int recv_tag);

  /// Description of the operation left posted by a CollectiveTimeout, "" when none.
  /// While one is pending every other call throws Error.
  virtual std::string pending() const = 0;
  /// Waits (up to timeout_s() again) for the pending operation, if any, to complete;
  /// throws CollectiveTimeout when it still does not.
  virtual void wait_pending() = 0;

 protected:
  // What the implementations provide. Each receives a call the public function has
  // checked (see the class note): dense non-null views, a supported device and dtype,
  // the stream on the data's device, matching dtypes and counts, valid ranks and tags.

  /// all_reduce on a checked view.
  virtual void do_all_reduce(const TensorView& data, ReduceOp op, Stream stream) = 0;
  /// all_gather on checked views.
  virtual void do_all_gather(const TensorView& in, const TensorView& out, Stream stream) = 0;
  /// all_gather_start on checked views. Default: do_all_gather, then a complete handle.
  virtual AsyncHandle do_all_gather_start(const TensorView& in, const TensorView& out, Stream stream);
  /// all_reduce_start on a checked view. Default: do_all_reduce, then a complete handle.
  virtual AsyncHandle do_all_reduce_start(const TensorView& data, ReduceOp op, Stream stream);
  /// reduce_scatter on checked views.
  virtual void do_reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                                 Stream stream) = 0;
  /// reduce_scatter_start on checked views. Default: do_reduce_scatter, then a complete handle.
  virtual AsyncHandle do_reduce_scatter_start(const TensorView& in, const TensorView& out, ReduceOp op,
                                              Stream stream);
  /// broadcast on a checked view and root.
  virtual void do_broadcast(const TensorView& data, int root, Stream stream) = 0;
  /// send on a checked view, peer and tag.
  virtual void do_send(const TensorView& data, int peer, int tag, Stream stream) = 0;
  /// recv on a checked view, peer and tag.
  virtual void do_recv(const TensorView& data, int peer, int tag, Stream stream) = 0;
  /// send_start on a checked view, peer and tag. Default: do_send, then a complete handle.
  virtual AsyncHandle do_send_start(const TensorView& data, int peer, int tag, Stream stream);
  /// recv_start on a checked view, peer and tag. Default: a handle whose wait() runs do_recv.
  virtual AsyncHandle do_recv_start(const TensorView& data, int peer, int tag, Stream stream);
  /// send_recv on checked views, peer and tags.
  virtual void do_send_recv(const TensorView& out, const TensorView& in, int peer, int send_tag,
                            int recv_tag, Stream stream) = 0;
  /// barrier.
  virtual void do_barrier() = 0;
  /// Why views on `device` are not carried (when !supports(device)), appended to the
  /// ShapeError, e.g. "Debian's Open MPI is not CUDA-aware". Default: "".
  virtual std::string device_note(Device device) const;

 private:
  void check_view(const char* op, const char* role, const TensorView& v, Stream stream) const;
  void check_reducible(const char* op, const TensorView& v) const;
  void check_pair(const char* op, const char* a_role, const TensorView& a, const char* b_role,
                  const TensorView& b) const;
  void check_all_gather(const TensorView& in, const TensorView& out, Stream stream) const;
  void check_all_reduce(const std::string& name, const TensorView& data, Stream stream) const;
  void check_reduce_scatter(const std::string& name, const TensorView& in, const TensorView& out,
                            Stream stream) const;
  void check_root(const char* op, int root) const;
  void check_peer(const char* op, int peer, int tag) const;
};

}  // namespace olmo2::parallel
