// Waiting on shared memory: doorbells (a futex word plus a sleeper count),
// spin-then-sleep waits, and the watch on peer processes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

namespace hora::shm {

using Clock = std::chrono::steady_clock;

// How long a sleeper sleeps before it looks again at what no doorbell
// announces (a peer process that died).
constexpr std::chrono::milliseconds kLivenessInterval{100};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// One member's doorbell in a segment. Anyone may ring it; only threads of
// the member sleep on it. A sleeper counts itself in `sleepers`, re-checks
// its condition and sleeps on `word` (a futex shared between processes);
// ring() makes a system call only when the count is not zero. Publishers
// store what they publish before calling ring(), which orders that store
// before its read of the count (the sleeper orders its count before its
// re-check), so a sleeper never misses a publication.
class Doorbell {
 public:
  Doorbell() = default;
  Doorbell(uint32_t* word, uint32_t* sleepers) : word_(word), sleepers_(sleepers) {}

  void ring() const noexcept;

  // Spins for about `spin`, then sleeps in rounds of at most
  // kLivenessInterval until ready() is true (returns true) or `deadline`
  // passes (returns false). Between rounds it calls idle(), which may
  // throw to end the wait.
  template <typename Ready, typename Idle>
  bool wait(Ready&& ready, Idle&& idle, Clock::time_point deadline, std::chrono::nanoseconds spin) const {
    if (spin.count() > 0) {
      const auto spin_until = Clock::now() + spin;
      for (int i = 0;; ++i) {
        if (ready()) return true;
        cpu_relax();
        if ((i & 31) == 31 && Clock::now() >= spin_until) break;
      }
    }
    for (;;) {
      if (ready()) return true;
      idle();
      const auto now = Clock::now();
      if (now >= deadline) return ready();
      const uint32_t seen = std::atomic_ref<uint32_t>(*word_).load(std::memory_order_acquire);
      std::atomic_ref<uint32_t>(*sleepers_).fetch_add(1, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!ready()) sleep(seen, std::min<Clock::duration>(deadline - now, kLivenessInterval));
      std::atomic_ref<uint32_t>(*sleepers_).fetch_sub(1, std::memory_order_relaxed);
    }
  }

 private:
  void sleep(uint32_t seen, Clock::duration timeout) const noexcept;

  uint32_t* word_ = nullptr;
  uint32_t* sleepers_ = nullptr;
};

// Watches the processes of a set's members for their exit, through pidfds
// (kill(pid, 0) where the kernel has none). The pids must come from the
// same pid namespace as this process (host identity includes it).
class PeerWatch {
 public:
  PeerWatch() = default;
  explicit PeerWatch(const std::vector<pid_t>& pids);
  PeerWatch(PeerWatch&& other) noexcept;
  PeerWatch& operator=(PeerWatch&& other) noexcept;
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;
  ~PeerWatch();

  // Whether member `rank`'s process has exited (a zombie counts).
  bool exited(int rank) const;
  pid_t pid(int rank) const { return pids_[static_cast<size_t>(rank)]; }

 private:
  void close_all() noexcept;

  std::vector<pid_t> pids_;
  std::vector<int> pidfds_;  // -1 where none
};

}  // namespace hora::shm
