// ProgressPool: the threads that run every process set's engine on one rank,
// instead of a thread per set (docs/progress_threads.md).
//
// Waiting is shared: an idle set's control plane is armed (ControlPlane::
// arm(): a futex word that changes when it has something, or descriptors
// that become readable), and one watcher thread sleeps on up to
// kSetsPerWatch sets' words at once (futex_waitv; shared memory and
// in-process planes), one on every armed descriptor (epoll; TCP planes),
// plus each set's next due time (stall inspection, liveness checks). Running
// is not: a set that is notified (a submission, a control message, its due
// time) is queued and a worker runs its Client::service(), which may block
// in a collective for as long as the op takes. A set is run by one thread at
// a time; a notification that arrives while it runs makes it run again.
//
// A watcher that finds sets ready runs them itself, still holding its
// watch, and then sleeps on it again: a control message costs the set one
// thread wake, as with a thread of its own, and no hand-off. When one of
// those runs enters a collective (BlockingScope), the watch is left to
// another thread at once. A set queued otherwise (a submission) gets a
// thread woken (or started, up to max_threads) only when no thread is
// running a set outside a collective: short runs stay on the threads that
// are awake, and a set in a collective never holds up the others. Threads
// idle for a second above `resting` exit. So the thread count follows the
// number of sets in a collective at once, not the number of live sets, and
// no set waits behind another set's collective (below the cap); it may
// wait behind another set's short run (negotiation, a control message).
//
// Threads: add(), notify() and remove() from any thread; remove() blocks
// until no thread runs the set or watches its control plane. The pool owns
// its threads; clients must be removed before it is destroyed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <thread>
#include <vector>

#include "control/control_plane.h"
#include "util/sleep_notice.h"

namespace hora {

class ProgressPool {
 public:
  using Clock = std::chrono::steady_clock;

  // One process set's engine, as the pool runs it.
  class Client {
   public:
    virtual ~Client() = default;
    // Does what the set has to do now without waiting for messages (it may
    // block in a collective). Returns when it must run again if nothing
    // notifies it first, or nullopt: the pool drops it (stopped or broken).
    virtual std::optional<Clock::time_point> service() = 0;
    // Its control plane; must be armable().
    virtual ControlPlane& control() = 0;
  };
  struct Slot;

  // `resting`: idle threads kept; `max_threads`: the most it starts;
  // `descriptor_spin`: while a caller waits for an op, how long the thread
  // that watches the sets' sockets looks for a message before it sleeps (a
  // message is then most likely that op's next step, and costs no wake-up;
  // zero where the ranks' threads outnumber the cores).
  explicit ProgressPool(int resting = 2, int max_threads = 64,
                        std::chrono::microseconds descriptor_spin = std::chrono::microseconds(100));
  ~ProgressPool();
  ProgressPool(const ProgressPool&) = delete;
  ProgressPool& operator=(const ProgressPool&) = delete;

  // Whether this kernel lets one thread wait on many futex words; without
  // it every set keeps a thread of its own.
  static bool supported();
  // Registers `client` and queues it (its first service() runs at once).
  std::shared_ptr<Slot> add(Client& client);
  // The same, running the first service() on the calling thread (the one
  // that connected the set: no hand-off to a pool thread).
  std::shared_ptr<Slot> add_and_run(Client& client);
  // The set has work: queues it, or makes it run again if it runs now.
  void notify(Slot& slot);
  // Drops the set: disarms its control plane, waits until no thread runs
  // it; client is not called afterwards. Idempotent.
  void remove(Slot& slot);

  // A caller that waits for an op of the set looks for the set's control
  // messages itself (ProgressEngine::look): borrow() takes the set when no
  // thread runs it and it is not queued, and takes its descriptors off the
  // watch, so that a message wakes no thread (the caller finds it); the
  // caller runs the set's loop and hands it back with give_back() and the
  // time its loop must run again (nullopt: drop it, as after service()).
  // Only sets armed by descriptors are lent; false otherwise. A
  // notification meanwhile queues the set once it is given back.
  //
  // `keep_lent`: the caller found what it waited for, and its next op is
  // likely soon: the descriptors stay off the watch for up to kLendFor
  // (the watcher then runs the set once and watches it again), so that a
  // peer's message that comes before that op wakes no thread either, and
  // the next borrow() costs no system call. notify() ends the lending at
  // once (a thread runs the set and watches it again).
  static constexpr std::chrono::milliseconds kLendFor{2};
  bool borrow(Slot& slot);
  void give_back(Slot& slot, std::optional<Clock::time_point> due, bool keep_lent = false);
  // Whether the set's descriptors are off the watch (lent; any thread).
  static bool lent(const Slot& slot);

  // Brackets a call that may block for as long as an op takes (a
  // collective): on a pool thread, another thread serves queued sets and
  // this thread's watch meanwhile. `lazy`: only once the call is about to
  // sleep (util/sleep_notice.h; for data planes whose waits say so), so
  // that one that completes while it spins costs no hand-off. Does nothing
  // on other threads.
  class BlockingScope {
   public:
    explicit BlockingScope(bool lazy = false);
    ~BlockingScope();
    BlockingScope(const BlockingScope&) = delete;
    BlockingScope& operator=(const BlockingScope&) = delete;

   private:
    void enter();

    ProgressPool* pool_;
    bool lazy_ = false;
    bool entered_ = false;
    SleepNotice previous_;
  };

  // The pool's threads now, and how many of them are idle (tests).
  int threads() const;
  int idle_threads() const;

  // Sets one watcher sleeps on (futex_waitv's limit less the pool's word).
  static constexpr size_t kSetsPerWatch = 127;

 private:
  struct Watch;
  struct Worker;

  void work(Worker* self);
  void keep_watch(std::unique_lock<std::mutex>& lock, Watch& watch);
  void watch(std::unique_lock<std::mutex>& lock, Watch& watch);
  void watch_descriptors(std::unique_lock<std::mutex>& lock, Watch& watch);
  bool watch_descriptors_locked(Slot& slot, const std::vector<int>& fds);
  bool rewatch_locked(Slot& slot);
  void forget_descriptors_locked(Slot& slot);
  void run(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Slot>& slot);
  void notify_locked(const std::shared_ptr<Slot>& slot, bool staff = true);
  void arm_locked(const std::shared_ptr<Slot>& slot, Clock::time_point due);
  void disarm_locked(Slot& slot);
  void bump(Watch& watch);
  void staff_locked();
  Watch* vacant_watch_locked();
  bool idle_wait(std::unique_lock<std::mutex>& lock, Worker* self);

  const int resting_;
  const int max_threads_;
  const std::chrono::microseconds descriptor_spin_;
  mutable std::mutex mutex_;
  std::condition_variable removed_;  // a slot stopped running
  // Guarded by mutex_.
  bool stopping_ = false;
  std::deque<std::shared_ptr<Slot>> ready_;
  std::vector<std::unique_ptr<Watch>> watches_;  // the descriptor watch first
  uint64_t last_id_ = 0;
  std::map<uint64_t, Slot*> registered_;  // by id: sets with descriptors in the watch
  std::vector<Worker*> idle_;  // most recently idle last
  int threads_ = 0;
  int running_ = 0;  // threads in a set's service() outside a BlockingScope
  int coming_ = 0;  // threads woken or started that have not taken work yet
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> exited_;  // to join
  std::condition_variable all_exited_;
};

}  // namespace hora
