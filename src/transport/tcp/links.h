// The connections of one member of a process set to every other member, on
// hora's own TCP data plane, and the one loop that moves bytes on them: a
// round of sends and receives that all progress at once on non-blocking
// sockets, on the calling thread, with no thread hand-off and nothing
// allocated per round.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "net/socket.h"

namespace hora::tcp_transport {

using Clock = std::chrono::steady_clock;

// One transfer of a round: `bytes` bytes to or from the member at set rank
// `peer`. A send moves data[0, bytes); with `limit` set, only the first
// *limit bytes are ready yet (a relay: limit points at a receive's `done`
// in the same round). A receive fills data[0, bytes) and calls
// `arrived(context, done)` after each read that added bytes.
struct Move {
  bool send = false;
  int peer = -1;
  uint8_t* data = nullptr;
  size_t bytes = 0;
  size_t done = 0;
  const size_t* limit = nullptr;
  void (*arrived)(void* context, size_t done) = nullptr;
  void* context = nullptr;

  static Move to(int peer, const void* data, size_t bytes) {
    return Move{true, peer, static_cast<uint8_t*>(const_cast<void*>(data)), bytes};
  }
  static Move from(int peer, void* data, size_t bytes) { return Move{false, peer, static_cast<uint8_t*>(data), bytes}; }
};

// How a round waits for its peers.
struct Waiting {
  // Spin this long after the last progress while a caller waits for an op
  // (util/caller_waits.h; else only kUnwatchedSpin), then sleep in poll(2).
  std::chrono::nanoseconds spin{std::chrono::microseconds(200)};
  std::chrono::milliseconds timeout{60'000};  // without a byte moving
};

class Links {
 public:
  // `sockets` by set rank (invalid at `rank`), connected and authenticated;
  // they are made non-blocking here.
  Links(std::vector<int> global_ranks, int rank, std::vector<net::Socket> sockets, Waiting waiting);
  ~Links();

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }

  // Runs every move until all are done. Throws PeerFailure when a peer's
  // connection closes or breaks (or abort() was called), Timeout when no
  // byte moves for the timeout; any failure (a reduction that throws too)
  // breaks the links for good: every
  // connection is shut down, so that peers in a round with this member
  // fail too, and later rounds fail at once. `what` names the collective
  // in messages.
  void run(std::span<Move> moves, const char* what);

  // Any thread: breaks the links with `reason` (PeerFailure for the round in
  // progress and every later one). Idempotent.
  void abort(const std::string& reason);

 private:
  void progress(std::span<Move> moves, const char* what);
  // One pass of non-blocking sends and receives; whether any byte moved.
  bool pump(std::span<Move> moves, const char* what);
  // Sleeps in poll(2) until a pending move can progress, abort() is called
  // or `deadline` passes (then throws Timeout).
  void sleep(std::span<Move> moves, Clock::time_point deadline, bool& napped, const char* what);
  [[noreturn]] void fail(const std::string& message, bool timeout);
  void check_usable(const char* what);
  std::string peer_name(int peer) const;

  const std::vector<int> global_ranks_;
  const int rank_;
  const std::string set_name_;
  std::vector<net::Socket> sockets_;
  std::vector<std::string> addresses_;  // the peers' numeric addresses
  const Waiting waiting_;
  net::Wakeup wakeup_;
  std::vector<pollfd> fds_;  // reused between rounds
  std::atomic<bool> broken_{false};
  std::mutex reason_mutex_;
  std::string reason_;  // why the links broke (guarded by reason_mutex_)
};

}  // namespace hora::tcp_transport
