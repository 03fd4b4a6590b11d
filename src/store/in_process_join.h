// One object shared by threads of one process that meet through a store:
// the members of a process set whose ranks are threads (the local
// transport, the in-process control plane).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "hora/store.h"

namespace hora {

// Returns the object of this round of `members` callers under `prefix` in
// `store`: the round's first caller makes it with `make` and publishes its
// id; the others find it by that id, within `timeout` (Timeout) unless
// `cancelled` (InvalidArgument). InvalidArgument when the id comes from
// another process; Timeout when the maker dropped the object already.
// Any thread. Errors start with `what`.
std::shared_ptr<void> join_in_process(Store& store, const std::string& prefix, int64_t members,
                                      const std::function<std::shared_ptr<void>()>& make,
                                      std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled,
                                      const std::string& what);

}  // namespace hora
