// Negotiator: the coordinator's decision procedure for one process set.
//
// Members' requests are recorded as they arrive (set ranks, in any order). An
// op is ready once every member has submitted it; ready() then returns the
// responses, in the order the ops became ready, after checking that every
// member asked for the same thing (a mismatch becomes an error response that
// names the ranks and fields), fusing small allreduces and marking which ops
// enter the response cache. Deterministic, no threads, no I/O: it is driven
// by the engine on set rank 0 and tested directly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "coordinator/fusion_planner.h"
#include "coordinator/request.h"
#include "coordinator/response_cache.h"

namespace hora {

struct NegotiatorOptions {
  int32_t process_set_id = 0;
  std::vector<int> global_ranks;  // sorted; index = set rank
  size_t fusion_threshold = 64 << 20;
  size_t cache_capacity = 1024;
};

// An op some members submitted and others have not (for stall reports).
struct PendingOp {
  std::string name;
  std::vector<int> submitted;  // global ranks
  std::vector<int> missing;    // global ranks
};

class Negotiator {
 public:
  explicit Negotiator(NegotiatorOptions options);

  // Records a full request from set rank `rank`. A second request under a
  // name the same rank already has pending throws Internal.
  void submit(int rank, Request request);
  // Records a request sent as a response-cache slot.
  void submit_cached(int rank, uint32_t slot);

  std::vector<Response> ready();
  std::vector<PendingOp> pending() const;
  const ResponseCache& cache() const { return cache_; }
  int size() const { return static_cast<int>(options_.global_ranks.size()); }

 private:
  struct Entry {
    std::vector<Request> by_rank;
    std::vector<bool> seen;
    std::vector<bool> via_cache;
    int count = 0;
  };
  void record(int rank, Request request, bool via_cache);
  Response decide(const std::string& name, Entry& entry);
  std::string validate(const std::string& name, const Entry& entry) const;
  std::vector<int64_t> sizes_for(const Entry& entry) const;

  NegotiatorOptions options_;
  FusionPlanner planner_;
  ResponseCache cache_;
  std::map<std::string, Entry> table_;
  std::vector<std::string> ready_order_;
  std::map<std::string, Request> decided_;  // requests behind this round's responses
};

}  // namespace hora
