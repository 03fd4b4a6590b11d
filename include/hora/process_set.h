// A process set as this rank knows it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hora {

struct ProcessSet {
  int32_t id = -1;
  std::vector<int> ranks;  // sorted global ranks
  int rank = -1;           // this process's rank within the set, -1 if not a member
  int generation = 0;      // sets over these ranks this rank added before this one (dynamic sets)

  bool included() const { return rank >= 0; }
  int size() const { return static_cast<int>(ranks.size()); }
};

// "[0, 2, 3]"
std::string ranks_string(const std::vector<int>& ranks);

}  // namespace hora
