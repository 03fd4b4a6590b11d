#include "transport/backend.h"

#include <algorithm>

#include "hora/errors.h"

namespace hora {

std::string describe_set(const std::vector<int>& global_ranks) {
  std::string out = "process set [";
  for (size_t i = 0; i < global_ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(global_ranks[i]);
  }
  return out + "]";
}

int set_rank_of(const std::vector<int>& global_ranks, int my_global_rank, const std::string& who) {
  if (global_ranks.empty() || !std::is_sorted(global_ranks.begin(), global_ranks.end()) ||
      std::adjacent_find(global_ranks.begin(), global_ranks.end()) != global_ranks.end())
    throw InvalidArgument(who + ": a process set's global ranks must be sorted and distinct");
  auto it = std::lower_bound(global_ranks.begin(), global_ranks.end(), my_global_rank);
  if (it == global_ranks.end() || *it != my_global_rank)
    throw InvalidArgument(who + ": global rank " + std::to_string(my_global_rank) + " is not a member of the process set");
  return static_cast<int>(it - global_ranks.begin());
}

void Backend::reduce(void* buf, size_t count, DataType dtype, ReduceOp op, int root) {
  if (root < 0 || root >= size())
    throw InvalidArgument("reduce root " + std::to_string(root) + " is not a set rank of a set of " +
                          std::to_string(size()));
  allreduce(buf, count, dtype, op);
}

}  // namespace hora
