// The membership protocol: how the members of a new process set, and only
// they, agree on its id.
//
// The set's lowest rank draws the next id from a counter in the rendezvous
// store and publishes it under a key made of the ranks and a generation
// number (how many sets over exactly these ranks this rank has created
// before); the other members wait for that key. Non-members take no part.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "hora/store.h"

namespace hora {

// Sorted copy of `ranks`; throws InvalidArgument naming the bad value for an
// empty list, a negative or too large rank, or a duplicate.
std::vector<int> validate_ranks(std::vector<int> ranks, int world_size);

// Called by every member with the same arguments; returns the same id on all.
// Ids start at `first_dynamic_id` and are never reused within the job.
int32_t agree_process_set_id(Store& store, const std::vector<int>& ranks, int my_global_rank, int generation,
                             int32_t first_dynamic_id, std::chrono::milliseconds timeout);

}  // namespace hora
