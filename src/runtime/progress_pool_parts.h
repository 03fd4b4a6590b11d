// The parts of a ProgressPool that its two source files share: a set's
// slot, a watch, a worker (progress_pool.cc: threads, futex watches and
// running; progress_pool_descriptors.cc: the descriptor watch and lending a
// set to a caller). Internal to the runtime layer.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <semaphore>
#include <thread>
#include <vector>

#include "runtime/progress_pool.h"
#include "util/futex.h"

namespace hora {
namespace progress_pool_parts {

// A watcher that wakes for one set's due time runs every set due this
// soon with it, so that timers of many sets cost one wake.
inline constexpr std::chrono::milliseconds kCoalesce{10};

}  // namespace progress_pool_parts

struct ProgressPool::Slot : std::enable_shared_from_this<Slot> {
  enum State : int { kIdle, kQueued, kRunning, kAgain };

  explicit Slot(Client& c) : client(&c) {}

  Client* const client;
  std::atomic<int> state{kQueued};
  // Guarded by the pool's mutex.
  uint64_t id = 0;  // names it in the descriptor watch (never 0)
  bool removed = false;
  bool armed = false;
  FutexWait wait;
  // Its descriptors in the descriptor watch, each one-shot: the kernel
  // takes one off once it fires, and arming the set puts back only those
  // that fired (`fired`, indices into fds), where the set is armed by the
  // same descriptors again: a set woken by one message costs one system
  // call to watch again, not two for each of its descriptors.
  std::vector<int> fds;
  std::vector<uint32_t> fired;
  std::vector<int> lent_fds;  // taken off the watch while lent (borrow())
  Clock::time_point due = Clock::time_point::max();
  Watch* watch = nullptr;  // listed there while idle
  // Its descriptors (listed in fds) are off the watch: lent to a caller
  // (borrow()). Written under the pool's mutex.
  std::atomic<bool> lent{false};
};

// The sets one watcher sleeps on: up to kSetsPerWatch futex words, or (the
// descriptor watch, one per pool) any number of armed descriptors in an
// epoll set. Guarded by the pool's mutex, except `word`, which the
// watcher's futex_waitv reads.
struct ProgressPool::Watch {
  Watch() = default;
  ~Watch() {
    if (epoll >= 0) close(epoll);
    if (bell >= 0) close(bell);
  }
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  std::vector<std::shared_ptr<Slot>> slots;
  uint32_t word = 0;      // changed to wake the watcher when its list changes
  int epoll = -1;         // the descriptor watch's epoll set
  int bell = -1;          // and its eventfd (in the set as id 0), written instead
  bool held = false;      // a thread watches it
  bool sleeping = false;  // that thread sleeps
  Clock::time_point sleep_until = Clock::time_point::max();  // its timeout then
};

struct ProgressPool::Worker {
  std::binary_semaphore wake{0};
  bool handed = false;  // taken off the idle list to do something
  bool exited = false;
  std::thread thread;
};

}  // namespace hora
