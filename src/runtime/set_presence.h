// Before a process set's transport connects, its members meet in the store:
// each says it has reached the set's creation and waits for the others. A
// member that never arrives is then named for what it is, a rank that has
// not called hvd.init() (the global set) or add_process_set (any other),
// with what the launcher knows of its process, instead of as a transport's
// rendezvous key that was never set.
//
// While members are missing, the lowest member present warns once per
// warning period; at the timeout every member present throws Timeout. When
// the launcher has written that a missing member's process ended, every
// member present throws PeerFailure within about half a second instead.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "hora/process_set.h"
#include "hora/store.h"

namespace hora {

struct PresenceOptions {
  std::chrono::milliseconds timeout{120'000};
  std::chrono::milliseconds warning_time{30'000};  // 0: no warnings
};

// `set_store` is the set's own prefix of the job's store; `job_store`
// holds what the launcher publishes about each rank's process (see
// launcher_process_key). `meanwhile` (if any) runs once this member's
// arrival is published, before it waits for the others. `arrived` (if
// any) waits up to the time it is given for the transport to see every
// member (true when it does): given 10 ms before the store is asked, so
// that members arriving together meet without a round trip.
void await_members(Store& set_store, Store& job_store, const ProcessSet& set, const PresenceOptions& options,
                   const std::atomic<bool>& cancelled, const std::function<void()>& meanwhile = {},
                   const std::function<bool(std::chrono::milliseconds)>& arrived = {});

// Publishes that `global_rank` has reached the set's creation (what
// await_members does first; the lowest member of an added set does it
// before publishing the set's id, so that its arrival travels with the id).
void announce_presence(Store& set_store, int global_rank);

// Where horarun says it watches the ranks' processes, and where it writes
// how rank `global_rank`'s process ended ("exited with code 1", "killed by
// signal 9").
inline constexpr const char* kLauncherWatchKey = "hora.launcher.watch";
std::string launcher_process_key(int global_rank);

}  // namespace hora
