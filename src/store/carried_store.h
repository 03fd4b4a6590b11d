// A view of one process set's store that keeps what this member wrote
// through it and what it was handed, and answers reads of those keys itself.
//
// The set's lowest member prepares a new set (the shared-memory factory
// makes its segment) and announces itself before it publishes the set's id;
// what it wrote meanwhile travels to the other members with the id
// (process_set/membership.h), and they hand it to their view. Their reads
// of those keys, and of their own writes, then cost no round trip to the
// rendezvous server: a set whose members share a host is made with one.
//
// A newer value written through the view replaces the kept one; keys
// another member wrote are written once, so their kept values stay true.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hora/store.h"

namespace hora {

using StoreEntries = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

class CarriedStore final : public Store {
 public:
  explicit CarriedStore(std::shared_ptr<Store> base);

  // set() and post() write through and keep the value (a newer one
  // replaces it); a post of the value this view already holds for the key
  // is not sent again.
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  void post(const std::string& key, const std::vector<uint8_t>& value) override;
  // Kept keys are answered here; the others are read from the base store.
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  // Counters change: always the base store's.
  int64_t add(const std::string& key, int64_t delta) override;
  std::optional<std::vector<uint8_t>> held(const std::string& key) override;

  // Hands over what was written through this view so far, in order, and
  // records no more (the lowest member carries it with the set's id once).
  StoreEntries take_written();
  // Keeps entries that another member wrote (and the base store holds).
  void keep(const StoreEntries& entries);

 private:
  std::vector<uint8_t>* find(const std::string& key);  // mutex_ held
  void keep_written(const std::string& key, const std::vector<uint8_t>& value);  // mutex_ held

  const std::shared_ptr<Store> base_;
  mutable std::mutex mutex_;
  StoreEntries kept_;     // guarded by mutex_: written here or handed over (a set has few keys)
  StoreEntries written_;  // guarded by mutex_
  bool recording_ = true;  // guarded by mutex_
};

// The entries as bytes, and back; decoding checks every length and throws
// net::DecodeError (an Internal) on anything malformed.
std::vector<uint8_t> encode_store_entries(const StoreEntries& entries);
StoreEntries decode_store_entries(const std::vector<uint8_t>& bytes);

}  // namespace hora
