#include "process_set/membership.h"

#include <algorithm>
#include <string>

#include "hora/errors.h"
#include "hora/process_set.h"

namespace hora {

std::string ranks_string(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

std::vector<int> validate_ranks(std::vector<int> ranks, int world_size) {
  if (ranks.empty()) throw InvalidArgument("a process set needs at least one rank");
  for (int r : ranks)
    if (r < 0 || r >= world_size)
      throw InvalidArgument("rank " + std::to_string(r) + " is out of range for a job of size " +
                            std::to_string(world_size) + " (valid ranks are 0.." + std::to_string(world_size - 1) +
                            ")");
  std::sort(ranks.begin(), ranks.end());
  auto dup = std::adjacent_find(ranks.begin(), ranks.end());
  if (dup != ranks.end())
    throw InvalidArgument("rank " + std::to_string(*dup) + " appears more than once in process set " +
                          ranks_string(ranks));
  return ranks;
}

int32_t agree_process_set_id(Store& store, const std::vector<int>& ranks, int my_global_rank, int generation,
                             int32_t first_dynamic_id, std::chrono::milliseconds timeout) {
  std::string key = "process_sets/" + ranks_string(ranks) + "/" + std::to_string(generation);
  if (my_global_rank == ranks.front()) {
    auto id = static_cast<int32_t>(first_dynamic_id - 1 + store.add("process_sets/counter", 1));
    std::string text = std::to_string(id);
    store.set(key, std::vector<uint8_t>(text.begin(), text.end()));
    return id;
  }
  return stored_int32(store.get(key, timeout), key);
}

}  // namespace hora
