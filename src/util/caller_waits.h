// Whether a thread of this process is blocked waiting for an op's result
// (Work::wait). A collective that nobody waits for yet runs beside the
// rank's own compute (gradients reduced while backward still runs): a wait
// that spins for its peers there takes the core that compute needs, so
// transports spin only while a caller waits, and otherwise sleep at once.
#pragma once

#include <chrono>

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

// The spin of a wait that no caller waits on: about one look, then sleep.
inline constexpr auto kUnwatchedSpin = std::chrono::microseconds(2);

}  // namespace hora
