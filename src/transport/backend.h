// The communicator of one process set, and the factory that makes them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hora/store.h"
#include "hora/types.h"

namespace hora {

namespace shm {
class FastLane;
}

// A control-plane message from another member of the same process set, or
// the news that its control connection closed (`closed`, no bytes).
struct ControlMessage {
  int from = -1;  // sender's rank within the set
  std::vector<uint8_t> bytes;
  bool closed = false;
};

// One process set's communicator.
//
// Data-plane calls (allreduce ... barrier) are made only by the set's progress
// engine thread, in the same order on every member, and block until done; a
// peer that dies or a call that runs past the timeout throws PeerFailure or
// Timeout. abort() makes them fail at once, from any thread. The control
// plane is a star between set rank 0 (the coordinator) and every other
// member: send_control may be called from any thread; receive_control only
// from the engine thread; wake() from any thread, to end a receive_control
// early (used when local work arrives).
class Backend {
 public:
  virtual ~Backend() = default;

  virtual int rank() const = 0;  // this process's rank within the set
  virtual int size() const = 0;

  // In place over `count` elements: every member ends with the reduction.
  // `op` is kSum, kMin, kMax or kProduct (Average is a Sum plus scaling,
  // done by the caller).
  virtual void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) = 0;
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

  // Sends to set rank `to` (0 from a member; any member from rank 0).
  virtual void send_control(int to, const std::vector<uint8_t>& bytes) = 0;
  // Blocks until a message arrives (returned), wake() is called or the
  // deadline passes (nullopt). A peer whose control connection closed is
  // returned once, as a message with `closed` set, after every message it
  // sent; later calls no longer wait on it.
  virtual std::optional<ControlMessage> receive_control(
      std::chrono::steady_clock::time_point deadline) = 0;
  virtual void wake() = 0;

  // Any thread; idempotent; never blocks for long. The data plane is given
  // up: the collective in progress and every later one fail at once with
  // PeerFailure naming `reason`, and peers blocked in a collective with this
  // member fail too instead of waiting for their timeout. The control plane
  // keeps working.
  virtual void abort(const std::string& reason) = 0;

  // The set's fast lane (src/transport/shm/fast_lane.h) when its members
  // share one, else null.
  virtual shm::FastLane* fast_lane() { return nullptr; }
};

// Makes the communicators of one process. create() is called by the members
// of a set only (never by other ranks), each with the same sorted
// `global_ranks` and a store already prefixed for that set. It blocks until
// every member is connected, the timeout passes (Timeout naming who is
// missing) or another thread sets `cancelled`: then it gives up within about
// kCancelPoll, throwing InvalidArgument. (Gloo's own connection step, once
// every member has published its address, is bounded only by the timeout.)
class BackendFactory {
 public:
  static constexpr std::chrono::milliseconds kCancelPoll{200};

  virtual ~BackendFactory() = default;
  virtual std::string name() const = 0;
  // Work this member may do for a set before the others have arrived (the
  // shared-memory factory makes the set's segment on set rank 0, and maps
  // it on the others when the set store holds its record already), which
  // create() with the same set store then picks up. The result must
  // outlive that create(); dropping it undoes the work if create() did not
  // take it. The default does nothing.
  virtual std::shared_ptr<void> prepare(const std::vector<int>& global_ranks, int my_global_rank,
                                        const std::shared_ptr<Store>& set_store) {
    (void)global_ranks, (void)my_global_rank, (void)set_store;
    return nullptr;
  }
  // Waits up to `within` for every member to arrive, as far as what
  // prepare() returned shows without asking the store (the shared-memory
  // factory: each member has attached the segment). False when they have
  // not, or when it cannot tell (the default, at once).
  virtual bool await_arrival(const std::shared_ptr<void>& head_start, std::chrono::milliseconds within) const {
    (void)head_start, (void)within;
    return false;
  }
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

// What make_shm_backend_factory may do.
struct ShmOptions {
  bool enabled = true;        // false: every set takes the network path (HORA_SHM=0)
  size_t slot_bytes = 0;      // per member and buffer, a multiple of 4096; 0: 1 MiB
  std::string host_identity;  // added to this host's identity (tests simulate hosts)
  int host_ranks = 0;         // the job's ranks on this host (0: unknown); waits spin less when
                              // they outnumber the cores
  int world_size = 0;         // the job's ranks (0: unknown); a set naming a rank beyond them is
                              // refused at once
};

// Sets whose members all publish the same host identity (boot id, host
// name, /dev/shm device, pid namespace) in the set's store get a shared-
// memory backend (src/transport/shm/); sets over several hosts, one of them
// with two members or more, a hierarchical one (src/transport/hierarchical/:
// shared memory inside each host, `network` between hosts); other sets, and
// a set whose segment cannot be made or mapped (with one warning), get
// `network`'s backends.
std::unique_ptr<BackendFactory> make_shm_backend_factory(std::unique_ptr<BackendFactory> network,
                                                         ShmOptions options = {});

// Ranks as threads of one process (tests). Every thread's factory must share
// the same store, which the local backend uses to find its peers.
std::unique_ptr<BackendFactory> make_local_backend_factory();

}  // namespace hora
