// The data plane of one process set, and the factory that makes them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hora/store.h"
#include "hora/types.h"
#include "store/cancellable_wait.h"

namespace hora {

// The name of a process set in messages: "process set [0, 2, 5]".
std::string describe_set(const std::vector<int>& global_ranks);

// The set rank of `my_global_rank` in `global_ranks`; InvalidArgument
// (prefixed with `who`) unless they are sorted and distinct and name it.
int set_rank_of(const std::vector<int>& global_ranks, int my_global_rank, const std::string& who = "backend");

// One process set's data plane: its collectives on byte buffers.
//
// Data-plane calls (allreduce ... barrier) are made by one thread at a time
// (the set's executor), in the same order on every member, and block until
// done; a peer that dies or a call that runs past the timeout throws
// PeerFailure or Timeout. abort() makes them fail at once, from any thread.
// Negotiation messages never go through a Backend: they travel on the
// set's ControlPlane (src/control/), which planner/ makes beside it.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual int rank() const = 0;  // this process's rank within the set
  virtual int size() const = 0;

  // In place over `count` elements: every member ends with the reduction.
  // `op` is kSum, kMin, kMax or kProduct (Average is a Sum plus scaling,
  // done by the caller).
  virtual void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) = 0;
  // In place: member `root` (a set rank) ends with the reduction; the
  // others' buffers are left in any state. For a part whose result one
  // member passes on (a hierarchical allreduce's host part, before the
  // leaders' exchange); a backend that has nothing cheaper allreduces.
  virtual void reduce(void* buf, size_t count, DataType dtype, ReduceOp op, int root);
  // `out` receives the members' inputs concatenated in set-rank order;
  // recv_bytes[i] is the byte size of member i's input (this member's
  // input is recv_bytes[rank()] bytes at `in`).
  virtual void allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) = 0;
  // `root` is a set rank.
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  // send_bytes[i] bytes go from `in` (packed in set-rank order) to member i;
  // recv_bytes[i] bytes arrive from member i into `out` (packed likewise).
  virtual void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                         const std::vector<size_t>& recv_bytes) = 0;
  virtual void barrier() = 0;

  // Whether every wait of its collectives calls about_to_sleep()
  // (util/sleep_notice.h) before it sleeps.
  virtual bool notices_sleep() const { return false; }

  // Any thread; idempotent; never blocks for long. The data plane is given
  // up: the collective in progress and every later one fail at once with
  // PeerFailure naming `reason`, and peers blocked in a collective with this
  // member fail too instead of waiting for their timeout. The set's
  // control plane keeps working.
  virtual void abort(const std::string& reason) = 0;
};

// Makes the data planes of one process. create() is called by the members
// of a set only (never by other ranks), each with the same sorted
// `global_ranks` and a store already prefixed for that set. It blocks until
// every member is connected, the timeout passes (Timeout naming who is
// missing) or another thread sets `cancelled`: then it gives up within about
// kCancelPoll, throwing InvalidArgument. (Gloo's own connection step, once
// every member has published its address, is bounded only by the timeout.)
class BackendFactory {
 public:
  static constexpr std::chrono::milliseconds kCancelPoll = hora::kCancelPoll;

  virtual ~BackendFactory() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<Backend> create(const std::vector<int>& global_ranks, int my_global_rank,
                                          std::shared_ptr<Store> set_store,
                                          std::chrono::milliseconds timeout,
                                          const std::atomic<bool>& cancelled) = 0;
  // The same, never cancelled.
  std::unique_ptr<Backend> create(const std::vector<int>& global_ranks, int my_global_rank,
                                  std::shared_ptr<Store> set_store, std::chrono::milliseconds timeout) {
    const std::atomic<bool> never{false};
    return create(global_ranks, my_global_rank, std::move(set_store), timeout, never);
  }
};

// Gloo over TCP. `hostname` is the address this process listens on.
std::unique_ptr<BackendFactory> make_gloo_backend_factory(const std::string& hostname);

// hora's own TCP data plane (transport/tcp/tcp_backend.h).
struct TcpOptions {
  std::string hostname = "127.0.0.1";  // the address this process listens on
  // How long a collective spins on its sockets after the last progress
  // while a caller waits for an op (util/caller_waits.h), before it sleeps.
  std::chrono::nanoseconds spin{std::chrono::microseconds(200)};
  // Connections to a host that answers nothing for this long break
  // (net::watch_liveness; 0: never).
  std::chrono::milliseconds link_timeout{0};
};
std::unique_ptr<BackendFactory> make_tcp_backend_factory(TcpOptions options);

// Ranks as threads of one process (tests). Every thread's factory must share
// the same store, which the local backend uses to find its peers.
std::unique_ptr<BackendFactory> make_local_backend_factory();

}  // namespace hora
