// Waiting on shared memory: doorbells (a futex word plus a sleeper count),
// spin-then-sleep waits, and the watch on peer processes.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "util/caller_waits.h"
#include "util/futex.h"
#include "util/sleep_notice.h"

namespace hora::shm {

using Clock = std::chrono::steady_clock;

// How long a sleeper sleeps before it looks again at what no doorbell
// announces (a peer process that died).
constexpr std::chrono::milliseconds kLivenessInterval{100};

// A waiter that finds itself crowded (Seats) this many times in one wait
// moves to another CPU; before that, and after, it yields.
constexpr int kCrowdedLooksBeforeMove = 16;

// Moves the calling thread off the CPU it runs on, to another its
// affinity allows, by taking that CPU out of its affinity mask and then
// putting the mask back. Returns the CPU it left, or -1 when there is no
// other CPU or the kernel refuses. The mask put back is the one read
// before: a change another thread made in between is lost, and (Linux
// 6.2 and later) it counts as one the thread asked for, so it no longer
// widens by itself when the thread's cpuset grows.
int move_off_this_cpu() noexcept;

// One member's doorbell in a segment. Anyone may ring it; only threads of
// the member sleep on it. A sleeper counts itself in `sleepers`, re-checks
// its condition and sleeps on `word` (a futex shared between processes);
// ring() makes a system call only when a sleeper is counted. Publishers
// store what they publish before calling ring(), which orders that store
// before its read of the count (the sleeper orders its count before its
// re-check), so a sleeper never misses a publication.
class Doorbell {
 public:
  Doorbell() = default;
  Doorbell(uint32_t* word, uint32_t* sleepers) : word_(word), sleepers_(sleepers) {}

  void ring() const noexcept;
  // Whether a thread sleeps on it now (or is about to look once more
  // before it does: ring() then wakes it).
  bool sleeping() const noexcept;

  // Spins for about `spin` (while no caller waits for an op, only
  // kUnwatchedSpin: util/caller_waits.h), then sleeps in rounds of at most
  // kLivenessInterval until ready() is true (returns true) or `deadline`
  // passes (returns false). Between rounds it calls idle(), which may
  // throw to end the wait.
  template <typename Ready, typename Idle>
  bool wait(Ready&& ready, Idle&& idle, Clock::time_point deadline, std::chrono::nanoseconds spin) const {
    return wait(ready, idle, deadline, spin, [] { return false; });
  }
  // The same, asking crowded() about every microsecond while it spins:
  // true means that what it waits for needs this CPU (Seats below). It
  // then yields the CPU, except at the kCrowdedLooksBeforeMove-th such
  // answer, where it moves to another CPU instead (move_off_this_cpu()).
  template <typename Ready, typename Idle, typename Crowded>
  bool wait(Ready&& ready, Idle&& idle, Clock::time_point deadline, std::chrono::nanoseconds spin,
            Crowded&& crowded) const {
    if (spin.count() > 0) {
      const auto start = Clock::now();
      const auto spin_until = start + spin;
      const auto unwatched_until = start + std::min<std::chrono::nanoseconds>(spin, kUnwatchedSpin);
      int crowded_looks = 0;
      for (int i = 0;; ++i) {
        if (ready()) return true;
        cpu_relax();
        if ((i & 31) != 31) continue;
        const auto now = Clock::now();
        if (now >= spin_until || (now >= unwatched_until && !caller_waiting())) break;
        if (!crowded()) continue;
        if (++crowded_looks == kCrowdedLooksBeforeMove && move_off_this_cpu() >= 0) continue;
        sched_yield();
      }
    }
    bool napped = false;  // once before about_to_sleep() (util/sleep_notice.h)
    for (;;) {
      if (ready()) return true;
      idle();
      const auto now = Clock::now();
      if (now >= deadline) return ready();
      const uint32_t seen = std::atomic_ref<uint32_t>(*word_).load(std::memory_order_acquire);
      const Counted counted(*this);
      if (!ready()) {
        Clock::duration nap = std::min<Clock::duration>(deadline - now, kLivenessInterval);
        if (!napped && sleep_noticed()) nap = std::min<Clock::duration>(nap, kNapBeforeNotice);
        else about_to_sleep();
        napped = true;
        sleep(seen, nap);
      }
    }
  }

  // Looks for up to `look`, yielding the CPU between looks, until ready()
  // is true (returns true). Meanwhile it counts as a looker: sleeping() is
  // true, so whoever would wake another thread of this member for what it
  // looks at rings this bell instead, and that ring makes no system call
  // unless a thread also sleeps on the bell (the looker finds what was
  // published at its next look). Where the
  // machine's ranks outnumber its cores this waits on a peer in another
  // process faster than spinning, which holds the core the peer needs, or
  // sleeping, whose wake-up takes the peer's time (docs/performance.md,
  // "Waiting for the host's log on a crowded machine").
  template <typename Ready>
  bool look_yielding(Ready&& ready, std::chrono::nanoseconds look) const {
    const Counted counted(*this, kLooker);
    const auto until = Clock::now() + look;
    for (;;) {
      if (ready()) return true;
      if (Clock::now() >= until) return false;
      sched_yield();
    }
  }

  // Counts a sleeper that sleeps elsewhere (futex_wait_any()) until
  // disarm(), so that ring() wakes it: returns the word to sleep on and the
  // value it held before the count, or nullopt (not counted) when ready()
  // is true already. The same ordering as wait().
  template <typename Ready>
  std::optional<FutexWait> arm(Ready&& ready) const {
    const uint32_t seen = std::atomic_ref<uint32_t>(*word_).load(std::memory_order_acquire);
    count();
    if (!ready()) return FutexWait{word_, seen};
    disarm();
    return std::nullopt;
  }
  void disarm() const noexcept { uncount(kSleeper); }

  // The counts in the sleepers word: sleepers in the low half, lookers
  // (look_yielding()) in the high half.
  static constexpr uint32_t kSleeper = 1;
  static constexpr uint32_t kLooker = 1u << 16;

 private:
  // Counts a sleeper (or a looker), ordered before its next look at its
  // condition, as ring() needs.
  void count(uint32_t kind = kSleeper) const noexcept {
    std::atomic_ref<uint32_t>(*sleepers_).fetch_add(kind, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  void uncount(uint32_t kind) const noexcept {
    std::atomic_ref<uint32_t>(*sleepers_).fetch_sub(kind, std::memory_order_relaxed);
  }

  // count() for its lifetime (also when ready() throws).
  class Counted {
   public:
    explicit Counted(const Doorbell& bell, uint32_t kind = kSleeper) noexcept : bell_(bell), kind_(kind) {
      bell_.count(kind);
    }
    // Ordered before the waiter's look that follows (the leader's caller
    // looks for its host's work once more after it stops counting).
    ~Counted() {
      bell_.uncount(kind_);
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    Counted(const Counted&) = delete;
    Counted& operator=(const Counted&) = delete;

   private:
    const Doorbell& bell_;
    const uint32_t kind_;
  };

  void sleep(uint32_t seen, Clock::duration timeout) const noexcept;

  uint32_t* word_ = nullptr;
  uint32_t* sleepers_ = nullptr;
};

// Where the members' executing threads run: one word per member in the
// segment, holding 1 + the CPU the member's thread last ran on when it
// published a phase, submitted a fast-lane op or looked whether it is
// crowded (any of its threads that does so: the word follows the latest).
// A waiter whose CPU a member it waits for last recorded is crowded: that
// member is not running (the waiter is), and if it is queued behind the
// waiter, spinning only keeps it from running. The scheduler puts threads
// that wake each other on one CPU and leaves them there while they spin,
// even with another CPU idle; two members of a set that spin on one CPU
// take a whole spin each per hand-off (benchmarks/wakeup.cc). A record may
// be stale (its thread has moved since): a yield or a move where none was
// needed. Used by the threads that run the member's collectives; the
// words belong to the segment, which must outlive this.
class Seats {
 public:
  Seats() = default;
  // `words`: each member's record (1 + CPU; 0 before it first records),
  // by set rank.
  Seats(std::vector<uint32_t*> words, int rank) : words_(std::move(words)), rank_(rank) {}

  // Records the calling thread's CPU as this member's; returns it (-1
  // where the kernel does not say).
  int take() const noexcept;
  // Whether `member` last recorded `cpu`.
  bool at(int member, int cpu) const noexcept {
    return cpu >= 0 &&
           std::atomic_ref<uint32_t>(*words_[static_cast<size_t>(member)]).load(std::memory_order_relaxed) ==
               static_cast<uint32_t>(cpu) + 1;
  }
  // Whether another member for which waiting_for(member) is true last
  // recorded `cpu`.
  template <typename WaitingFor>
  bool crowd(int cpu, WaitingFor&& waiting_for) const {
    for (int r = 0; r < static_cast<int>(words_.size()); ++r)
      if (r != rank_ && at(r, cpu) && waiting_for(r)) return true;
    return false;
  }
  // Records this thread's CPU and says whether another member for which
  // waiting_for(member) is true last recorded it (Doorbell::wait's
  // crowded()).
  template <typename WaitingFor>
  bool crowded(WaitingFor&& waiting_for) const {
    return crowd(take(), waiting_for);
  }

 private:
  std::vector<uint32_t*> words_;
  int rank_ = 0;
};

// A pidfd of one peer process, shared by every set that watches it: a
// rank in many sets with the same peers holds one descriptor per peer
// process, not one per set and peer.
class Pidfd {
 public:
  explicit Pidfd(int fd) : fd_(fd) {}
  ~Pidfd();
  Pidfd(const Pidfd&) = delete;
  Pidfd& operator=(const Pidfd&) = delete;
  // Whether the process has exited (a zombie counts).
  bool exited() const;

 private:
  int fd_;
};

// Watches the processes of a set's members for their exit, through pidfds
// (kill(pid, 0) where the kernel has none). The pids must come from the
// same pid namespace as this process (host identity includes it).
class PeerWatch {
 public:
  PeerWatch() = default;
  // Takes the pidfd of a process another set watches already, unless that
  // process has exited (its pid may name a new process now).
  explicit PeerWatch(const std::vector<pid_t>& pids);

  // Whether member `rank`'s process has exited (a zombie counts).
  bool exited(int rank) const;
  pid_t pid(int rank) const { return pids_[static_cast<size_t>(rank)]; }

 private:
  std::vector<pid_t> pids_;
  std::vector<std::shared_ptr<const Pidfd>> pidfds_;  // null where none
};

}  // namespace hora::shm
