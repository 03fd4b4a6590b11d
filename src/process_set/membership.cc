#include "process_set/membership.h"

#include <algorithm>
#include <limits>

#include "hora/errors.h"
#include "hora/process_set.h"

namespace hora {

std::string ranks_string(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

std::vector<int> validate_ranks(std::vector<int> ranks, int world_size) {
  const std::string set = "process set " + ranks_string(ranks) + ": ";
  if (ranks.empty()) throw InvalidArgument(set + "a process set needs at least one rank");
  for (int r : ranks)
    if (r < 0 || r >= world_size)
      throw InvalidArgument(set + "rank " + std::to_string(r) + " is out of range for a job of size " +
                            std::to_string(world_size) + " (valid ranks are 0.." + std::to_string(world_size - 1) +
                            ")");
  std::sort(ranks.begin(), ranks.end());
  auto dup = std::adjacent_find(ranks.begin(), ranks.end());
  if (dup != ranks.end()) throw InvalidArgument(set + "rank " + std::to_string(*dup) + " appears more than once");
  return ranks;
}

int32_t dynamic_process_set_id(int32_t first_dynamic_id, int world_size, int lowest_rank, int64_t sequence) {
  if (world_size <= 0 || lowest_rank < 0 || lowest_rank >= world_size || sequence < 0 || first_dynamic_id < 1)
    throw InvalidArgument("no process set id for rank " + std::to_string(lowest_rank) + " of " +
                          std::to_string(world_size) + ", sequence " + std::to_string(sequence) +
                          ", first id " + std::to_string(first_dynamic_id));
  const int64_t limit = std::numeric_limits<int32_t>::max();
  if (sequence > (limit - first_dynamic_id - lowest_rank) / world_size)
    throw InvalidArgument("rank " + std::to_string(lowest_rank) + " has created " + std::to_string(sequence) +
                          " process sets as their lowest member; no process set ids remain for it");
  return static_cast<int32_t>(first_dynamic_id + sequence * world_size + lowest_rank);
}

std::string process_set_id_key(const std::vector<int>& ranks, SetOrigin origin, int generation) {
  return "process_sets/" + ranks_string(ranks) + (origin == SetOrigin::kAdded ? "/added/" : "/first_use/") +
         std::to_string(generation);
}

// The record: the id in decimal, then, when something is carried, a newline
// and the carried entries (encode_store_entries).
void publish_process_set_id(Store& store, const std::vector<int>& ranks, SetOrigin origin, int generation,
                            int32_t id, const StoreEntries& carried) {
  const std::string text = std::to_string(id);
  std::vector<uint8_t> record(text.begin(), text.end());
  if (!carried.empty()) {
    record.push_back('\n');
    const std::vector<uint8_t> entries = encode_store_entries(carried);
    record.insert(record.end(), entries.begin(), entries.end());
  }
  store.post(process_set_id_key(ranks, origin, generation), record);
}

PublishedSet published_process_set(Store& store, const std::vector<int>& ranks, SetOrigin origin, int generation,
                                   std::chrono::milliseconds timeout) {
  std::string key = process_set_id_key(ranks, origin, generation);
  std::vector<uint8_t> value;
  try {
    value = store.get(key, timeout);
  } catch (const Timeout&) {
    throw Timeout("the id of process set " + ranks_string(ranks) + " (set number " + std::to_string(generation + 1) +
                  " over these ranks) was not published by its lowest member, rank " + std::to_string(ranks.front()) +
                  ", within " + std::to_string(timeout.count()) +
                  " ms: did every member call add_process_set for it?");
  }
  const auto newline = std::find(value.begin(), value.end(), uint8_t{'\n'});
  PublishedSet published;
  published.id = stored_int32(std::vector<uint8_t>(value.begin(), newline), key);
  if (newline != value.end()) {
    try {
      published.carried = decode_store_entries(std::vector<uint8_t>(newline + 1, value.end()));
    } catch (const Internal& e) {
      throw Internal("rendezvous key '" + key + "': " + e.what() + ": the store is shared with another job, or corrupt");
    }
  }
  return published;
}

}  // namespace hora
