// Futex words that one thread can wait on many of at once (futex_waitv(2),
// Linux 5.16 and later): how a rank's progress threads sleep on every
// process set's control plane together (runtime/progress_pool.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

namespace hora {

// A word to wait on while it still holds `seen`. Words may be in memory
// shared between processes (the waits are never process-private).
struct FutexWait {
  uint32_t* word = nullptr;
  uint32_t seen = 0;
};

// Wakes every thread waiting on `word` (futex_wait_any() included).
void futex_wake_all(uint32_t* word) noexcept;

// Sleeps until one of `waits` (at most kMaxFutexWaits) no longer holds its
// `seen` value or is woken, or `deadline` passes. Returns false when the
// kernel has no futex_waitv (the caller must wait some other way); spurious
// returns happen, so callers look at what they wait for afterwards.
bool futex_wait_any(std::span<const FutexWait> waits, std::chrono::steady_clock::time_point deadline) noexcept;

// Whether this kernel has futex_waitv (asked once).
bool futex_wait_any_supported() noexcept;

inline constexpr size_t kMaxFutexWaits = 128;  // FUTEX_WAITV_MAX

}  // namespace hora
