// Store reads that another thread can cut short: they wait in short slices
// and give up once a flag is set. Used while a process set connects, so
// that stopping the set never waits for the connection timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "hora/store.h"

namespace hora {

// How often a cancellable wait while a process set connects looks at its
// flag: stopping a set gives up its connection within about this long.
inline constexpr std::chrono::milliseconds kCancelPoll{200};

// Like store.get(key, timeout), but checks `cancelled` every `poll` and then
// throws InvalidArgument. A timeout throws Timeout naming the key and the
// full timeout. Messages start with `what` (if not empty).
std::vector<uint8_t> get_unless_cancelled(Store& store, const std::string& key,
                                          std::chrono::milliseconds timeout,
                                          const std::atomic<bool>& cancelled,
                                          std::chrono::milliseconds poll, const std::string& what);

// Like store.wait(keys, timeout), cancelled the same way.
void wait_unless_cancelled(Store& store, const std::vector<std::string>& keys,
                           std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled,
                           std::chrono::milliseconds poll, const std::string& what);

}  // namespace hora
