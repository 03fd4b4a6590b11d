// A process set as this rank knows it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hora {

// How a rank came to register a set. Only kAdded (add_process_set) is seen
// by every rank that calls it, members or not; kFirstUse (a member's first op
// on a set it never added) is counted apart, so that it never shifts the
// generation that non-members count for added sets.
enum class SetOrigin { kAdded, kFirstUse };

struct ProcessSet {
  int32_t id = -1;
  std::vector<int> ranks;  // sorted global ranks
  int rank = -1;           // this process's rank within the set, -1 if not a member
  int generation = 0;      // sets over these ranks, of the same SetOrigin, this rank registered before

  bool included() const { return rank >= 0; }
  int size() const { return static_cast<int>(ranks.size()); }
};

// "[0, 2, 3]"
std::string ranks_string(const std::vector<int>& ranks);

}  // namespace hora
