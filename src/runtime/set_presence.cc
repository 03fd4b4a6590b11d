#include "runtime/set_presence.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "util/log.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kPollSlice{100};
// How often a waiting member asks whether the launcher saw a missing
// member's process end (it then never arrives: fail at once).
constexpr milliseconds kEndedCheck{500};
constexpr milliseconds kArrivalWatch{10};

std::string presence_key(int global_rank) { return "present." + std::to_string(global_rank); }

// The value of `key` if it is set; never waits more than a moment.
std::optional<std::string> peek(Store& store, const std::string& key) {
  try {
    std::vector<uint8_t> value = store.get(key, milliseconds{1});
    return std::string(value.begin(), value.end());
  } catch (const Timeout&) {
    return std::nullopt;
  }
}

bool present(Store& store, int global_rank) { return peek(store, presence_key(global_rank)).has_value(); }

// "30 s", "0.3 s"
std::string seconds_text(milliseconds duration) {
  const long long tenths = (duration.count() + 50) / 100;
  if (tenths % 10 == 0 || tenths >= 100) return std::to_string((tenths + 5) / 10) + " s";
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " s";
}

// "global rank 1 has not called hvd.init() after 30 s (its process is alive)"
std::string absence_text(Store& job_store, const ProcessSet& set, const std::vector<int>& absent, milliseconds waited) {
  const bool watched = peek(job_store, kLauncherWatchKey).has_value();
  const std::string call = set.id == 0 ? "called hvd.init()" : "called add_process_set(" + ranks_string(set.ranks) + ")";
  std::string text;
  for (int rank : absent) {
    if (!text.empty()) text += "; ";
    text += "global rank " + std::to_string(rank) + " has not " + call + " after " + seconds_text(waited);
    if (std::optional<std::string> ended = peek(job_store, launcher_process_key(rank)))
      text += " (its process " + *ended + ")";
    else if (watched)
      text += " (its process is alive)";
  }
  return text;
}

// Whether the launcher has written that one of `absent`'s processes ended.
bool any_ended(Store& job_store, const std::vector<int>& absent) {
  return std::any_of(absent.begin(), absent.end(),
                     [&](int rank) { return peek(job_store, launcher_process_key(rank)).has_value(); });
}

std::vector<int> absent_members(Store& set_store, const ProcessSet& set) {
  std::vector<int> absent;
  for (int rank : set.ranks)
    if (!present(set_store, rank)) absent.push_back(rank);
  return absent;
}

}  // namespace

void announce_presence(Store& set_store, int global_rank) { set_store.post(presence_key(global_rank), {'1'}); }

std::string launcher_process_key(int global_rank) { return "hora.process." + std::to_string(global_rank); }

void await_members(Store& set_store, Store& job_store, const ProcessSet& set, const PresenceOptions& options,
                   const std::atomic<bool>& cancelled, const std::function<void()>& meanwhile,
                   const std::function<bool(milliseconds)>& arrived) {
  const int me = set.ranks.at(static_cast<size_t>(set.rank));
  announce_presence(set_store, me);
  if (meanwhile) meanwhile();
  if (arrived && arrived(kArrivalWatch)) return;
  std::vector<std::string> keys;
  for (int rank : set.ranks) keys.push_back(presence_key(rank));
  const auto start = Clock::now();
  auto next_warning = start + options.warning_time;
  auto next_ended_check = start + kEndedCheck;
  const std::string prefix = "process set " + std::to_string(set.id) + " " + ranks_string(set.ranks) + ": ";
  for (;;) {
    if (cancelled) throw InvalidArgument(prefix + "cancelled while waiting for its members");
    const auto now = Clock::now();
    const auto waited = std::chrono::duration_cast<milliseconds>(now - start);
    if (waited >= options.timeout) {
      const std::vector<int> absent = absent_members(set_store, set);
      if (absent.empty()) return;
      throw Timeout(prefix + absence_text(job_store, set, absent, waited) +
                    (set.id == 0 ? " (HORA_START_TIMEOUT)" : " (HORA_OP_TIMEOUT_SECONDS)"));
    }
    if (now >= next_ended_check) {
      // A member whose process has ended never arrives: say so now, not at
      // the timeout (the launcher writes how each process ended).
      next_ended_check = now + kEndedCheck;
      const std::vector<int> absent = absent_members(set_store, set);
      if (absent.empty()) return;
      if (any_ended(job_store, absent))
        throw PeerFailure(prefix + absence_text(job_store, set, absent, waited) + "; it never will");
    }
    if (options.warning_time.count() > 0 && now >= next_warning) {
      next_warning = now + options.warning_time;
      const std::vector<int> absent = absent_members(set_store, set);
      if (absent.empty()) return;
      // The lowest member present speaks for the others.
      const bool lowest_present =
          std::find_if(set.ranks.begin(), set.ranks.end(), [&](int r) {
            return std::find(absent.begin(), absent.end(), r) == absent.end();
          }) == std::find(set.ranks.begin(), set.ranks.end(), me);
      if (lowest_present) log_warning(prefix + absence_text(job_store, set, absent, waited));
    }
    auto slice = std::min({kPollSlice, std::chrono::ceil<milliseconds>(start + options.timeout - now)});
    if (options.warning_time.count() > 0)
      slice = std::min(slice, std::chrono::ceil<milliseconds>(next_warning - now));
    try {
      set_store.wait(keys, std::max(slice, milliseconds{1}));
      return;
    } catch (const Timeout&) {
    }
  }
}

}  // namespace hora
