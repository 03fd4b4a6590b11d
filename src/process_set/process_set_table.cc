#include "process_set/process_set_table.h"

#include <string>

#include "hora/errors.h"

namespace hora {

void ProcessSetTable::insert(const ProcessSet& set) {
  std::lock_guard<std::mutex> lock(mutex_);
  sets_[set.id] = set;
}

ProcessSet ProcessSetTable::get(int32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sets_.find(id);
  if (it != sets_.end()) return it->second;
  if (removed_.count(id))
    throw InvalidArgument("process set " + std::to_string(id) + " has been removed; create a new one");
  throw InvalidArgument("process set " + std::to_string(id) + " is not registered on this rank");
}

std::optional<ProcessSet> ProcessSetTable::find(int32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return std::nullopt;
  return it->second;
}

bool ProcessSetTable::erase(int32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!sets_.erase(id)) return false;
  removed_.insert(id);
  return true;
}

int ProcessSetTable::next_generation(const std::vector<int>& ranks, SetOrigin origin) {
  std::lock_guard<std::mutex> lock(mutex_);
  return generations_[{origin, ranks}]++;
}

int64_t ProcessSetTable::next_lowest_member_sequence() {
  std::lock_guard<std::mutex> lock(mutex_);
  return lowest_member_sequence_++;
}

std::vector<int32_t> ProcessSetTable::ids() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<int32_t> out;
  for (const auto& [id, set] : sets_) out.push_back(id);
  return out;
}

}  // namespace hora
