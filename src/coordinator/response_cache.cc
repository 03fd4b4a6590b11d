#include "coordinator/response_cache.h"

#include "hora/errors.h"

namespace hora {

int32_t ResponseCache::lookup(const Request& q) const {
  auto it = slot_by_name_.find(q.name);
  if (it == slot_by_name_.end() || !(slots_[it->second] == q)) return -1;
  return static_cast<int32_t>(it->second);
}

int32_t ResponseCache::insert(const Request& q) {
  if (full()) return -1;
  auto slot = static_cast<uint32_t>(slots_.size());
  slots_.push_back(q);
  slot_by_name_[q.name] = slot;
  return static_cast<int32_t>(slot);
}

const Request& ResponseCache::request(uint32_t slot) const {
  if (slot >= slots_.size())
    throw Internal("response cache slot " + std::to_string(slot) + " was never filled (cache holds " +
                   std::to_string(slots_.size()) + ")");
  return slots_[slot];
}

}  // namespace hora
