// What a member asks for (Request) and what the coordinator decides
// (Response). Both cross the wire; see wire.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hora/types.h"

namespace hora {


// One member's submission of one named op.
struct Request {
  std::string name;
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  int32_t root = -1;  // broadcast: set rank of the root
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // alltoall: rows sent to each member

  int64_t num_elements() const;
  size_t byte_size() const;
  // "allreduce 'loss' (float32 [4])": the op as stall and divergence
  // reports name it.
  std::string describe() const;
  bool operator==(const Request&) const = default;
};

// The name every member's join op carries in its own queue and in the
// response that completes it (the caller's name for a join is not used).
inline constexpr const char* kJoinName = "hora.join";

// The coordinator's decision: run these ops (several only for a fused
// allreduce), or fail them with `error`. Every member receives the same
// sequence of responses and executes it in order.
struct Response {
  OpType op = OpType::kAllreduce;
  std::vector<std::string> names;
  std::string error;            // non-empty: the ops fail with a Mismatch
  std::vector<int64_t> sizes;   // allgather: first dims per member;
                                // an op given up (error, Negotiator::abandon):
                                // the set ranks that had submitted it;
                                // alltoall: n*n rows, [sender * n + receiver];
                                // join: {global rank of the member that joined last}
  std::vector<uint8_t> cache;   // per name: 1 = both sides store it in the
                                // response cache under the next free slot
  std::vector<int32_t> slots;   // wire form, per name: the cache slot it is
                                // sent as, or -1 when sent by name
  std::vector<Request> requests;  // per name when some member joined without
                                  // submitting it (it takes part with a stand-in
                                  // built from these); empty otherwise
};

}  // namespace hora
