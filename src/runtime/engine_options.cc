#include "runtime/engine_options.h"

#include <algorithm>

#include "hora/process_set.h"

namespace hora {

std::string EngineOptions::broken_message(const std::vector<int>& missing_global, const std::string& reason) const {
  std::string out = "process set " + std::to_string(process_set_id) + " " + ranks_string(global_ranks) + " is broken";
  if (!missing_global.empty()) out += "; missing global rank(s) " + ranks_string(missing_global);
  return out + ": " + reason;
}

std::string EngineOptions::closed_message(const std::string& reason) const {
  return "process set " + std::to_string(process_set_id) + " " + ranks_string(global_ranks) + " is closed: " + reason;
}

std::string EngineOptions::goodbye_reason(int member) const {
  return "global rank " + std::to_string(global_ranks[static_cast<size_t>(member)]) +
         " left it (it shut hora down or removed the set)";
}

std::vector<int> EngineOptions::set_ranks_of(const std::vector<int>& global) const {
  std::vector<int> out;
  for (int g : global) {
    auto it = std::lower_bound(global_ranks.begin(), global_ranks.end(), g);
    if (it != global_ranks.end() && *it == g) out.push_back(static_cast<int>(it - global_ranks.begin()));
  }
  return out;
}

}  // namespace hora
