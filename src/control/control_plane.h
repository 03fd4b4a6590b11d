// The control plane of one process set: the negotiation messages between
// its members and its coordinator (set rank 0), apart from the data plane
// (transport/backend.h). Three implementations: a TCP star between hosts
// (control_channel.h), byte rings in the set's shared-memory segment within
// one host (shm_control_plane.h) and mailboxes between threads of one
// process (in_process_control.h, tests). planner/ picks one per set.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "util/futex.h"

namespace hora {

// A control-plane message from another member of the same process set, or
// the news that its control connection closed (`closed`, no bytes).
struct ControlMessage {
  int from = -1;  // sender's rank within the set
  std::vector<uint8_t> bytes;
  bool closed = false;
  // A closure that is the peer's host going silent: why, naming its address
  // ("no answer from 10.0.0.2 for 15 s ..."); empty for an ordinary closure.
  std::string unreachable;
  // The peer's address where it is on another host ("10.0.0.2"), else "".
  std::string address;
};

// A star between set rank 0 (the coordinator) and every other member.
// send() may be called from any thread; receive() only from the set's
// engine thread; wake() from any thread, to end a receive() early (used
// when local work arrives). Destroying a member's control plane closes its
// connections: its peers receive the closure.
class ControlPlane {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~ControlPlane() = default;

  // Sends to set rank `to` (0 from a member; any member from rank 0).
  // InvalidArgument for another rank or a message over net::kMaxFrameBytes;
  // PeerFailure when the peer's connection is closed or it reads nothing
  // for the set's timeout.
  virtual void send(int to, const std::vector<uint8_t>& bytes) = 0;
  // Blocks until a message arrives (returned), wake() is called or the
  // deadline passes (nullopt). A peer whose control connection closed is
  // returned once, as a message with `closed` set, after every message it
  // sent; later calls no longer wait on it.
  virtual std::optional<ControlMessage> receive(Clock::time_point deadline) = 0;
  // receive() without waiting, as cheaply as the plane can look (a
  // driver's look: runtime/progress_engine.h); it need not report wake(),
  // which the next receive() still does.
  virtual std::optional<ControlMessage> receive_now() { return receive(Clock::time_point::min()); }
  // receive_now() reading set rank `from`'s messages alone, where the
  // plane can (cheaper still): a message already read from another member
  // may still be returned; the others' unread ones wait for the next
  // receive_now() or receive().
  virtual std::optional<ControlMessage> receive_from(int from) {
    (void)from;
    return receive_now();
  }
  virtual void wake() = 0;

  // Waiting for many sets' control planes on one thread
  // (runtime/progress_pool.h), where armable(). arm(): until disarm(),
  // anything receive() would return for or return early for (a message, a
  // closure, wake()) either changes `wait.word` from `wait.seen` and wakes
  // its waiters, or, where `fds` is not empty, makes one of them readable;
  // `look_again`: when receive() must be called even if nothing did (a
  // check it makes by itself). nullopt: something is there now, not armed.
  // Called by the engine thread (which does not receive() meanwhile);
  // disarm() from any thread.
  struct Armed {
    FutexWait wait;
    std::vector<int> fds;
    Clock::time_point look_again = Clock::time_point::max();
  };
  virtual bool armable() const { return false; }
  // Before the engine starts: a descriptor that, readable, ends a
  // receive() early as wake() does (`clear` empties it), and that arm()
  // watches with the plane's own (a host's lane wakes the engine through
  // it: transport/shm/host_doorbells.h), where can_wake_on_descriptors().
  virtual bool can_wake_on_descriptors() const { return false; }
  virtual void also_wake_on(int fd, std::function<void()> clear) {
    (void)fd;
    (void)clear;
  }
  // Engine thread: spins a moment (the plane's own measure) for something
  // receive() would return for; whether it came.
  virtual bool await_briefly() { return false; }
  virtual std::optional<Armed> arm() { return std::nullopt; }
  virtual void disarm() {}
};

}  // namespace hora
