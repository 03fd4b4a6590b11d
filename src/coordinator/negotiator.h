// Negotiator: the coordinator's decision procedure for one process set.
//
// Members' requests are recorded as they arrive (set ranks, in any order). An
// op is ready once every member has submitted it; ready() then returns the
// responses, in the order the ops became ready, after checking that every
// member asked for the same thing (a mismatch becomes an error response that
// names the ranks and fields), fusing small allreduces and marking which ops
// enter the response cache. Deterministic, no threads, no I/O: it is driven
// by the engine on set rank 0 and tested directly.
//
// Join is one of its states. A member that submits a join op is joined: from
// then on an op is ready once every member that has not joined submitted it
// (and at least one such member exists). A joined member that did not submit
// it takes part with a stand-in that the response describes (requests): an
// allreduce gets zeros from it, whatever the reduction, and a barrier waits
// for it, as in Horovod; any other op fails on the members that submitted it.
// Once every member has joined, ready() ends with a join response that
// carries the global rank of the member that joined last (of several that
// joined between two ready() calls, the highest) and the set is back to
// normal. A joined member may submit nothing until then.
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
  std::string description;     // Request::describe() of the first submitter's request
};

class Negotiator {
 public:
  explicit Negotiator(NegotiatorOptions options);

  // Records a full request from set rank `rank` (a join request joins it).
  // A second request under a name the same rank already has pending, a
  // request from a joined member, or a second join throws Internal.
  void submit(int rank, Request request);
  // Records a request sent as a response-cache slot.
  void submit_cached(int rank, uint32_t slot);

  std::vector<Response> ready();
  // Gives up every op that waits for members: each becomes an error
  // response (`reason`, after the op's description) that fails it on the
  // members that submitted it, which it lists (sizes: set ranks), and the
  // negotiation of its name starts afresh. For diverged members, which can
  // then agree on the ops after.
  std::vector<Response> abandon(const std::string& reason);
  // Ops waiting for members; joined members are never missing.
  std::vector<PendingOp> pending() const;
  const ResponseCache& cache() const { return cache_; }
  int size() const { return static_cast<int>(options_.global_ranks.size()); }
  bool joined(int rank) const { return joined_.at(rank); }
  bool any_joined() const { return joined_count_ > 0; }
  // Whether some member has submitted `name` and it is not decided yet.
  bool has_pending(const std::string& name) const { return table_.count(name) != 0; }

 private:
  struct Entry {
    std::vector<Request> by_rank;
    std::vector<bool> seen;
    std::vector<bool> via_cache;
    int count = 0;
    bool queued = false;  // in ready_order_
  };
  void record(int rank, Request request, bool via_cache);
  void join(int rank);
  bool complete(const Entry& entry) const;
  void queue_if_complete(const std::string& name, Entry& entry);
  Response decide(const std::string& name, const Entry& entry) const;
  std::string joined_error(const Request& head, const Entry& entry) const;
  std::vector<int64_t> sizes_for(const Entry& entry) const;
  void describe_stand_ins(std::vector<Response>& planned, const std::vector<std::string>& stand_ins) const;
  Response finish_join();

  NegotiatorOptions options_;
  FusionPlanner planner_;
  ResponseCache cache_;
  std::map<std::string, Entry> table_;
  std::vector<std::string> ready_order_;
  std::map<std::string, Request> decided_;  // requests behind this round's responses

  std::vector<bool> joined_;  // per set rank
  int joined_count_ = 0;
  int last_joined_ = -1;          // global rank
  uint64_t round_ = 0;            // ready() calls so far
  uint64_t last_join_round_ = 0;  // the round in which last_joined_ joined
};

}  // namespace hora
