// ProcessSetTable: the process sets this rank has registered, the ids it has
// seen removed (ids are never reused, so a stale id is reported as removed),
// how many sets over each rank list it has added (the generation used by the
// membership protocol) and how many sets it has created as their lowest
// member (the sequence its ids are computed from). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "hora/process_set.h"

namespace hora {

class ProcessSetTable {
 public:
  void insert(const ProcessSet& set);
  // Returns the set; throws InvalidArgument for a removed or unknown id.
  ProcessSet get(int32_t id) const;
  std::optional<ProcessSet> find(int32_t id) const;
  // Marks `id` removed; false if it was not registered.
  bool erase(int32_t id);
  // Returns the generation for a new set over `ranks` of that origin and
  // counts it.
  int next_generation(const std::vector<int>& ranks, SetOrigin origin);
  // Returns how many sets this rank has created as their lowest member, and
  // counts one more.
  int64_t next_lowest_member_sequence();
  std::vector<int32_t> ids() const;

 private:
  mutable std::mutex mutex_;
  std::map<int32_t, ProcessSet> sets_;
  std::set<int32_t> removed_;
  std::map<std::pair<SetOrigin, std::vector<int>>, int> generations_;
  int64_t lowest_member_sequence_ = 0;
};

}  // namespace hora
