// The membership protocol: how the members of a new process set, and only
// they, agree on its id, and how any rank reads it afterwards.
//
// The set's lowest member computes the id from what it alone knows: its own
// rank and how many sets it has created as their lowest member before
// (dynamic_process_set_id). It publishes the id under a key made of the
// ranks, how the set came to be (SetOrigin) and a generation number (how many
// sets over exactly these ranks, of that origin, this rank has registered
// before); the other members, and non-members that want the id, read that
// key. Non-members take no part in creating the set.
//
// The id is therefore the same on every run of the same program, whatever
// order sets are created in by different lowest members, and two sets never
// share an id: different lowest members have different residues modulo the
// world size, and one lowest member never repeats its count.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "hora/process_set.h"
#include "hora/store.h"
#include "store/carried_store.h"

namespace hora {

// Sorted copy of `ranks`; throws InvalidArgument naming the bad value for an
// empty list, a negative or too large rank, or a duplicate.
std::vector<int> validate_ranks(std::vector<int> ranks, int world_size);

// The id of the set that `lowest_rank` creates as the `sequence`-th (from 0)
// set whose lowest member it is:
//   first_dynamic_id + sequence * world_size + lowest_rank.
// Throws InvalidArgument when that id does not fit in an int32 (the rank has
// created more sets than ids remain).
int32_t dynamic_process_set_id(int32_t first_dynamic_id, int world_size, int lowest_rank, int64_t sequence);

// The store key under which the lowest member of the `generation`-th set over
// `ranks` (sorted) publishes its id.
std::string process_set_id_key(const std::vector<int>& ranks, SetOrigin origin, int generation);

// The lowest member: publishes `id` for the other members and non-members,
// with what it wrote to the set's own store while preparing it (`carried`,
// see store/carried_store.h), in one record.
void publish_process_set_id(Store& store, const std::vector<int>& ranks, SetOrigin origin, int generation,
                            int32_t id, const StoreEntries& carried = {});

struct PublishedSet {
  int32_t id = -1;
  StoreEntries carried;
};

// Anyone: what the lowest member published for the `generation`-th set over
// `ranks`, waiting up to `timeout` for it. Throws Timeout naming the set and
// its lowest rank when it is not published in time, Internal when the
// record is malformed.
PublishedSet published_process_set(Store& store, const std::vector<int>& ranks, SetOrigin origin, int generation,
                                   std::chrono::milliseconds timeout);
inline int32_t published_process_set_id(Store& store, const std::vector<int>& ranks, SetOrigin origin,
                                        int generation, std::chrono::milliseconds timeout) {
  return published_process_set(store, ranks, origin, generation, timeout).id;
}

}  // namespace hora
