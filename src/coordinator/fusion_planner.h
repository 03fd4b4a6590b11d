// FusionPlanner: packs small allreduces into one buffer.
//
// Given the responses the negotiator found ready, in order, it merges
// allreduces of the same dtype, reduction and scale factors into one
// response while their total size stays within the fusion threshold. A
// merged response takes the place of its first member, so a later allreduce
// may move ahead of other responses; every member runs the planned order, so
// that is safe. Unfused responses keep their relative order. Pure function
// of its inputs.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "coordinator/request.h"

namespace hora {

class FusionPlanner {
 public:
  explicit FusionPlanner(size_t threshold_bytes) : threshold_(threshold_bytes) {}

  // `request_of(name)` gives the (validated) request behind a response name.
  std::vector<Response> plan(std::vector<Response> ready,
                             const std::function<const Request&(const std::string&)>& request_of) const;

 private:
  size_t threshold_;
};

}  // namespace hora
