#include "util/caller_waits.h"

#include <unistd.h>

#include <atomic>

namespace hora {
namespace {

std::atomic<int> waiting_callers{0};
std::atomic<int> looking_callers{0};

}  // namespace

CallerWaiting::CallerWaiting() noexcept { waiting_callers.fetch_add(1, std::memory_order_relaxed); }

CallerWaiting::~CallerWaiting() { waiting_callers.fetch_sub(1, std::memory_order_relaxed); }

bool more_than_cores(size_t threads) noexcept {
  static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);  // read once
  return cpus > 0 && threads > static_cast<size_t>(cpus);
}

bool caller_waiting() noexcept { return waiting_callers.load(std::memory_order_relaxed) > 0; }

CallerLooking::CallerLooking() noexcept { looking_callers.fetch_add(1, std::memory_order_relaxed); }

CallerLooking::~CallerLooking() { looking_callers.fetch_sub(1, std::memory_order_relaxed); }

bool caller_waiting_unlooked() noexcept {
  return waiting_callers.load(std::memory_order_relaxed) > looking_callers.load(std::memory_order_relaxed);
}

}  // namespace hora
