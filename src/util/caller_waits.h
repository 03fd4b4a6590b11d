// Whether a thread of this process is blocked waiting for an op's result
// (Work::wait). A collective that nobody waits for yet runs beside the
// rank's own compute (gradients reduced while backward still runs): a wait
// that spins for its peers there takes the core that compute needs, so
// transports spin only while a caller waits, and otherwise sleep at once.
#pragma once

#include <chrono>
#include <cstddef>

namespace hora {

// Counts the calling thread as waiting for its lifetime.
class CallerWaiting {
 public:
  CallerWaiting() noexcept;
  ~CallerWaiting();
  CallerWaiting(const CallerWaiting&) = delete;
  CallerWaiting& operator=(const CallerWaiting&) = delete;
};

// Whether some thread of this process waits for an op now.
bool caller_waiting() noexcept;

// Counts the calling thread, for its lifetime, as a waiting caller that
// looks for its set's control messages itself (ProgressEngine::look): no
// other thread need spin for those.
class CallerLooking {
 public:
  CallerLooking() noexcept;
  ~CallerLooking();
  CallerLooking(const CallerLooking&) = delete;
  CallerLooking& operator=(const CallerLooking&) = delete;
};

// Whether some thread of this process waits for an op and does not look
// for its messages itself.
bool caller_waiting_unlooked() noexcept;

// Whether `threads` threads that may spin outnumber this host's CPUs (the
// host's online CPUs, not this process's affinity: a launcher that binds
// each rank to a core of its own, as mpirun does, leaves one CPU in the
// mask while the ranks still run side by side). Then a waiter that spins
// takes the core its peer needs, and waits spin only briefly.
bool more_than_cores(size_t threads) noexcept;

// A pause inside a spin loop.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The spin of a wait that no caller waits on: about one look, then sleep.
inline constexpr auto kUnwatchedSpin = std::chrono::microseconds(2);

}  // namespace hora
