// Cross-member checks of one op: do all members agree on its fields?
#pragma once

#include <string>
#include <vector>

#include "coordinator/request.h"

namespace hora {

// Empty when every request agrees; otherwise an error message naming the op,
// the process set, each differing field and which global ranks gave which
// value, e.g. "allreduce 'loss' on process set 2: shape differs: [4] on
// ranks 0, 2; [3] on rank 1".
std::string validate_requests(const std::vector<Request>& by_rank, const std::vector<int>& global_ranks,
                              int process_set_id);

}  // namespace hora
