#include "store/in_process_join.h"

#include <unistd.h>

#include <charconv>
#include <map>
#include <mutex>

#include "hora/errors.h"
#include "store/cancellable_wait.h"

namespace hora {
namespace {

// Process-wide table from the id a round's first member publishes to that
// round's object. Entries expire with their object.
class Objects {
 public:
  static Objects& instance() {
    static Objects objects;
    return objects;
  }

  uint64_t add(const std::shared_ptr<void>& object) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(entries_, [](const auto& entry) { return entry.second.expired(); });
    entries_[++last_id_] = object;
    return last_id_;
  }

  std::shared_ptr<void> find(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : it->second.lock();
  }

 private:
  std::mutex mutex_;
  uint64_t last_id_ = 0;
  std::map<uint64_t, std::weak_ptr<void>> entries_;
};

std::vector<uint8_t> encode_id(uint64_t id) {
  const std::string text = std::to_string(getpid()) + ":" + std::to_string(id);
  return {text.begin(), text.end()};
}

uint64_t decode_id(const std::vector<uint8_t>& value, const std::string& what) {
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  long pid = 0;
  uint64_t id = 0;
  auto [colon, pid_error] = std::from_chars(begin, end, pid);
  if (pid_error != std::errc() || colon == end || *colon != ':' ||
      std::from_chars(colon + 1, end, id).ec != std::errc()) {
    throw Internal(what + ": malformed rendezvous id in the set store");
  }
  if (pid != getpid()) {
    throw InvalidArgument(what + ": the members of a process set must be threads of one process");
  }
  return id;
}

}  // namespace

// Members of one round share a ticket block from a counter in the store.
std::shared_ptr<void> join_in_process(Store& store, const std::string& prefix, int64_t members,
                                      const std::function<std::shared_ptr<void>()>& make,
                                      std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled,
                                      const std::string& what) {
  const int64_t ticket = store.add(prefix + "/join", 1) - 1;
  const std::string key = prefix + "/rendezvous/" + std::to_string(ticket / members);
  if (ticket % members == 0) {
    std::shared_ptr<void> object = make();
    store.set(key, encode_id(Objects::instance().add(object)));
    return object;
  }
  std::shared_ptr<void> object = Objects::instance().find(
      decode_id(get_unless_cancelled(store, key, timeout, cancelled, kCancelPoll, what), what));
  if (!object) throw Timeout(what + ": the other members of the process set gave up waiting");
  return object;
}

}  // namespace hora
