// ProcessSetTable: the process sets this rank has registered, the ids it has
// seen removed (ids are never reused, so a stale id is reported as removed),
// and how many sets over each rank list it has created (the generation used
// by the membership protocol). Thread-safe.
#pragma once

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
  // Returns the generation for a new set over `ranks` and counts it.
  int next_generation(const std::vector<int>& ranks);
  std::vector<int32_t> ids() const;

 private:
  mutable std::mutex mutex_;
  std::map<int32_t, ProcessSet> sets_;
  std::set<int32_t> removed_;
  std::map<std::vector<int>, int> generations_;
};

}  // namespace hora
