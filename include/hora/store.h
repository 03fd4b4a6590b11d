// Key-value store used for rendezvous: the launcher's TCP server, a file
// directory, or memory. Implementations are thread-safe; get/wait block until
// the keys exist or the timeout passes (then they throw hora::Timeout).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hora {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Sets `key` without waiting for the store to confirm it: for values that
  // others wait for while this thread goes on to wait for theirs. Readers
  // see the value as they would after set(); an error surfaces at a later
  // call. Stores without a cheaper way simply set().
  virtual void post(const std::string& key, const std::vector<uint8_t>& value) { set(key, value); }
  // Blocks until `key` exists, then returns its value.
  virtual std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (0 if absent) and
  // returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Blocks until every key exists.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // The value of `key` if this store can give it without a round trip (a
  // view that keeps copies), else nothing; never blocks. Most stores hold
  // nothing.
  virtual std::optional<std::vector<uint8_t>> held(const std::string& key) {
    (void)key;
    return std::nullopt;
  }
};

// A value that a peer stored as a decimal integer (an id, a tag) read back
// from `key`; throws Internal naming the key and the value when it is not
// one, or does not fit in an int32.
int32_t stored_int32(const std::vector<uint8_t>& value, const std::string& key);

// In-memory store shared by threads of one process (tests, the local backend).
std::shared_ptr<Store> make_hash_store();

// Prepends `prefix` + "/" to every key of `base`.
std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> base);

// Client of the launcher's rendezvous server. Every request carries `secret`;
// the server refuses requests without it. Connects lazily and reconnects once
// on a broken connection.
std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, const std::string& secret);

}  // namespace hora
