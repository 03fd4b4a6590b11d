#include "util/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace hora {
namespace {

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449  // the same number on every architecture that has it
#endif

// struct futex_waitv of <linux/futex.h>, which older headers lack.
struct WaitvEntry {
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t reserved;
};

constexpr uint32_t kFutex32 = 2;  // FUTEX_32

long waitv(WaitvEntry* entries, unsigned count, const timespec* absolute_monotonic) {
  return syscall(SYS_futex_waitv, entries, count, 0, absolute_monotonic, CLOCK_MONOTONIC);
}

}  // namespace

void futex_wake_all(uint32_t* word) noexcept { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

bool futex_wait_any_supported() noexcept {
  static const bool supported = [] {
    // A word that does not hold the value waited for: EAGAIN at once where
    // the call exists, ENOSYS where it does not.
    uint32_t word = 1;
    WaitvEntry entry{0, reinterpret_cast<uint64_t>(&word), kFutex32, 0};
    return waitv(&entry, 1, nullptr) == -1 && errno == EAGAIN;
  }();
  return supported;
}

bool futex_wait_any(std::span<const FutexWait> waits, std::chrono::steady_clock::time_point deadline) noexcept {
  if (waits.empty() || waits.size() > kMaxFutexWaits || !futex_wait_any_supported()) return false;
  WaitvEntry entries[kMaxFutexWaits];
  for (size_t i = 0; i < waits.size(); ++i)
    entries[i] = WaitvEntry{waits[i].seen, reinterpret_cast<uint64_t>(waits[i].word), kFutex32, 0};
  // steady_clock is CLOCK_MONOTONIC on Linux.
  timespec until{};
  const timespec* timeout = nullptr;
  if (deadline != std::chrono::steady_clock::time_point::max()) {
    const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
    until.tv_sec = static_cast<time_t>(nanos / 1'000'000'000);
    until.tv_nsec = static_cast<long>(nanos % 1'000'000'000);
    timeout = &until;
  }
  // EAGAIN (a word moved), EINTR and ETIMEDOUT all mean: look again.
  waitv(entries, static_cast<unsigned>(waits.size()), timeout);
  return true;
}

}  // namespace hora
