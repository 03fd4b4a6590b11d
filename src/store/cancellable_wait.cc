#include "store/cancellable_wait.h"

#include <algorithm>

#include "hora/errors.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 4; ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 4) out += ", ... (" + std::to_string(keys.size()) + " keys)";
  return out;
}

std::string prefixed(const std::string& what) { return what.empty() ? what : what + ": "; }

// Runs `attempt(slice)` until it succeeds, the timeout passes or `cancelled`
// is set; `attempt` throws Timeout when its slice runs out.
template <typename Attempt>
auto retry_in_slices(const std::vector<std::string>& keys, milliseconds timeout,
                     const std::atomic<bool>& cancelled, milliseconds poll, const std::string& what,
                     Attempt&& attempt) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (cancelled) throw InvalidArgument(prefixed(what) + "cancelled while waiting for rendezvous key(s) " + quoted(keys));
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    try {
      return attempt(std::clamp(left, milliseconds{1}, std::max(poll, milliseconds{1})));
    } catch (const Timeout&) {
      if (Clock::now() >= deadline) {
        throw Timeout(prefixed(what) + "rendezvous key(s) " + quoted(keys) + " were not set within " +
                      std::to_string(timeout.count()) + " ms");
      }
    }
  }
}

}  // namespace

std::vector<uint8_t> get_unless_cancelled(Store& store, const std::string& key, milliseconds timeout,
                                          const std::atomic<bool>& cancelled, milliseconds poll,
                                          const std::string& what) {
  return retry_in_slices({key}, timeout, cancelled, poll, what,
                         [&](milliseconds slice) { return store.get(key, slice); });
}

void wait_unless_cancelled(Store& store, const std::vector<std::string>& keys, milliseconds timeout,
                           const std::atomic<bool>& cancelled, milliseconds poll, const std::string& what) {
  if (keys.empty()) return;
  retry_in_slices(keys, timeout, cancelled, poll, what, [&](milliseconds slice) { store.wait(keys, slice); });
}

}  // namespace hora
