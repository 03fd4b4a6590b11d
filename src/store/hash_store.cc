// In-memory Store: one map behind one mutex; get/wait block on a condition
// variable that every set/add signals.
#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>

#include "hora/errors.h"
#include "hora/store.h"

namespace hora {
namespace {

// Integers live in the store as decimal text, so that `add` and `get` agree
// across store kinds.
int64_t parse_counter(const std::string& key, const std::vector<uint8_t>& value) {
  int64_t n = 0;
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  auto [ptr, ec] = std::from_chars(begin, end, n);
  if (ec != std::errc() || ptr != end) {
    throw InvalidArgument("hash store: add on key '" + key + "' whose value is not an integer");
  }
  return n;
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& key : keys) {
    if (!out.empty()) out += ", ";
    out += "'" + key + "'";
  }
  return out;
}

class HashStore final : public Store {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }

  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    wait_locked(lock, {key}, timeout);
    return values_.at(key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t result = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = values_.find(key);
      const int64_t current = it == values_.end() ? 0 : parse_counter(key, it->second);
      result = current + delta;
      const std::string text = std::to_string(result);
      values_[key] = std::vector<uint8_t>(text.begin(), text.end());
    }
    changed_.notify_all();
    return result;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    wait_locked(lock, keys, timeout);
  }

 private:
  std::vector<std::string> missing_locked(const std::vector<std::string>& keys) const {
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (values_.count(key) == 0) missing.push_back(key);
    }
    return missing;
  }

  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::max(timeout, std::chrono::milliseconds(0));
    const bool present = changed_.wait_until(lock, deadline, [&] {
      return missing_locked(keys).empty();
    });
    if (!present) {
      throw Timeout("hash store: timed out after " + std::to_string(timeout.count()) +
                    " ms waiting for key(s) " + join_keys(missing_locked(keys)));
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<uint8_t>> values_;
};

}  // namespace

std::shared_ptr<Store> make_hash_store() { return std::make_shared<HashStore>(); }

}  // namespace hora
