#include "coordinator/request.h"

namespace hora {

const char* op_type_name(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAlltoall: return "alltoall";
    case OpType::kReducescatter: return "reducescatter";
    case OpType::kBarrier: return "barrier";
    case OpType::kJoin: return "join";
  }
  return "unknown";
}

int64_t Request::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Request::describe() const {
  std::string out = std::string(op_type_name(op)) + " '" + name + "'";
  if (op == OpType::kBarrier || op == OpType::kJoin) return out;
  out += " (" + std::string(dtype_name(dtype)) + " [";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "])";
}

size_t Request::byte_size() const {
  return static_cast<size_t>(num_elements()) * dtype_size(dtype);
}

}  // namespace hora
