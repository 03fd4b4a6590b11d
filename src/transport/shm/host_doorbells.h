// HostDoorbells: wake-ups between the members of one host's lane
// (fast_lane.h, Mode::kHost) that a thread waiting on sockets can watch
// beside them. A futex cannot wake a thread asleep in epoll_wait, so each
// member binds a datagram socket of its own, named at random in the
// abstract namespace (no file; the host's members share its network
// namespace), and publishes the name in its member area; ringing a member
// sends a byte to it. (Measured against a futex in benchmarks/wakeup.cc:
// about a microsecond more a wake-up.)
//
// Threads: ring() from any thread; fd() and clear() from the thread that
// watches this member's socket.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "transport/shm/segment.h"

namespace hora::shm {

class HostDoorbells {
 public:
  // Binds this member's socket and publishes its name in `segment`; throws
  // Internal when the socket cannot be made.
  HostDoorbells(const Segment& segment, int rank, int size);
  ~HostDoorbells();  // closes this member's socket
  HostDoorbells(const HostDoorbells&) = delete;
  HostDoorbells& operator=(const HostDoorbells&) = delete;

  // This member's socket: readable once rung.
  int fd() const { return fd_; }
  const std::string& name() const { return path_; }
  // Reads every wake-up waiting.
  void clear() noexcept;
  // Wakes `member`. A member that has not published its socket yet is not
  // rung: it looks at its lane once it starts; one that has left is not
  // either.
  void ring(int member) noexcept;

 private:
  const Segment* segment_;
  const int rank_;
  std::string path_;
  int fd_ = -1;
  std::mutex mutex_;
  std::vector<int> peers_;  // connected sockets to each member, -1 until first rung
};

}  // namespace hora::shm
