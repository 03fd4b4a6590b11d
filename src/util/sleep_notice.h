// A thread that runs many process sets' progress (runtime/progress_pool.h)
// must learn when a call for one of them is about to sleep, for what may be
// as long as an op takes, so that another thread serves the others
// meanwhile; a call that completes while it spins costs no hand-off.
// Transports call about_to_sleep() before a wait sleeps; the notice the
// calling thread has set, if any, runs.
#pragma once

#include <chrono>

namespace hora {

struct SleepNotice {
  void (*notice)(void* context) = nullptr;
  void* context = nullptr;
};

// Sets the calling thread's notice ({}: none); returns the one it replaces.
SleepNotice set_sleep_notice(SleepNotice notice) noexcept;
// Runs the calling thread's notice, if any (it may run more than once).
void about_to_sleep() noexcept;
// Whether the calling thread has a notice set.
bool sleep_noticed() noexcept;

// A wait whose thread has a notice naps this long before it gives notice
// and sleeps on: a peer that is merely late by a scheduling slice costs no
// hand-off.
inline constexpr auto kNapBeforeNotice = std::chrono::microseconds(1000);

}  // namespace hora
