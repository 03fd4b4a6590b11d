#include "runtime/op_validation.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "collectives/adasum.h"
#include "collectives/collectives.h"
#include "coordinator/wire.h"
#include "hora/errors.h"

namespace hora {
namespace {

[[noreturn]] void invalid(const OpArgs& args, const std::string& what) {
  throw InvalidArgument(std::string(op_type_name(args.op)) + (args.name.empty() ? "" : " '" + args.name + "'") +
                        ": " + what);
}

void check_tensor(const OpArgs& args, const TensorView& t, const char* which) {
  for (int64_t d : t.shape)
    if (d < 0) invalid(args, std::string(which) + " has a negative dimension");
  if (t.data == nullptr && t.num_elements() > 0) invalid(args, std::string(which) + " has no data");
}

void check_output(const OpArgs& args, int64_t expected_elements) {
  check_tensor(args, args.output, "output");
  if (args.output.dtype != args.input.dtype)
    invalid(args, "output dtype " + std::string(dtype_name(args.output.dtype)) + " differs from input dtype " +
                      std::string(dtype_name(args.input.dtype)));
  if (args.output.num_elements() != expected_elements)
    invalid(args, "output holds " + std::to_string(args.output.num_elements()) + " elements, expected " +
                      std::to_string(expected_elements));
}

// Adasum reduces float tensors on sets whose size is a power of two, in
// allreduce only (as in Horovod).
void check_adasum(const ProcessSet& set, const OpArgs& args) {
  if (args.op != OpType::kAllreduce) invalid(args, "the Adasum reduction is supported by allreduce only");
  if (!adasum_supports(args.input.dtype))
    invalid(args, "Adasum supports float16, bfloat16, float32 and float64 tensors, not " +
                      std::string(dtype_name(args.input.dtype)));
  const int size = set.size();
  if ((size & (size - 1)) != 0)
    invalid(args, "Adasum needs a process set whose size is a power of two, but process set " +
                      std::to_string(set.id) + " has " + std::to_string(size) + " ranks");
}

void check_reduction(const ProcessSet& set, const OpArgs& args) {
  if (!is_valid_reduce_op(static_cast<uint8_t>(args.reduce_op)))
    invalid(args, "unknown reduce op " + std::to_string(static_cast<int>(args.reduce_op)));
  if (args.reduce_op == ReduceOp::kAdasum) check_adasum(set, args);
  if (args.input.dtype != DataType::kBool) return;
  if (args.prescale != 1.0 || args.postscale != 1.0) invalid(args, "scale factors are not supported for bool tensors");
  if (args.reduce_op == ReduceOp::kAverage) invalid(args, "Average is not supported for bool tensors");
}

std::vector<int64_t> alltoall_splits(const ProcessSet& set, const OpArgs& args) {
  const int64_t rows = args.input.shape.front();
  if (args.splits.empty()) {
    if (rows % set.size() != 0)
      invalid(args, "first dimension " + std::to_string(rows) + " does not divide evenly among " +
                        std::to_string(set.size()) + " ranks; pass splits");
    return std::vector<int64_t>(set.size(), rows / set.size());
  }
  if (static_cast<int>(args.splits.size()) != set.size())
    invalid(args, "splits has " + std::to_string(args.splits.size()) + " entries but process set " +
                      std::to_string(set.id) + " has " + std::to_string(set.size()) + " ranks");
  if (std::any_of(args.splits.begin(), args.splits.end(), [](int64_t s) { return s < 0; }))
    invalid(args, "splits must not be negative");
  int64_t sum = std::accumulate(args.splits.begin(), args.splits.end(), int64_t{0});
  if (sum != rows)
    invalid(args, "splits add up to " + std::to_string(sum) + " but the first dimension is " + std::to_string(rows));
  return args.splits;
}

}  // namespace

Request make_request(const ProcessSet& set, OpArgs& args) {
  if (args.name.size() > kMaxWireString)
    throw InvalidArgument(std::string(op_type_name(args.op)) + ": a name of " + std::to_string(args.name.size()) +
                          " bytes is too long; names are at most " + std::to_string(kMaxWireString) + " bytes");
  if (!set.included())
    invalid(args, "this rank is not a member of process set " + std::to_string(set.id) + " " +
                      ranks_string(set.ranks));
  Request q;
  q.name = args.name;
  q.op = args.op;
  if (args.op == OpType::kBarrier || args.op == OpType::kJoin) return q;  // no tensor
  check_tensor(args, args.input, "input");
  q.dtype = args.input.dtype;
  q.shape = args.input.shape;
  const bool needs_rows = args.op == OpType::kAllgather || args.op == OpType::kAlltoall ||
                          args.op == OpType::kReducescatter;
  if (needs_rows && args.input.shape.empty()) invalid(args, "needs a tensor with at least one dimension");
  switch (args.op) {
    case OpType::kAllreduce:
    case OpType::kReducescatter: {
      check_reduction(set, args);
      q.reduce_op = args.reduce_op;
      q.prescale = args.prescale;
      q.postscale = args.postscale;
      if (args.op == OpType::kAllreduce) {
        check_output(args, args.input.num_elements());
      } else {
        int64_t rows = args.input.shape.front();
        int64_t per_row = rows == 0 ? 0 : args.input.num_elements() / rows;
        check_output(args, reducescatter_block(rows, set.size(), set.rank).second * per_row);
      }
      break;
    }
    case OpType::kBroadcast: {
      auto it = std::find(set.ranks.begin(), set.ranks.end(), args.root);
      if (it == set.ranks.end())
        invalid(args, "root rank " + std::to_string(args.root) + " is not a member of process set " +
                          std::to_string(set.id) + " " + ranks_string(set.ranks));
      q.root = static_cast<int32_t>(it - set.ranks.begin());
      check_output(args, args.input.num_elements());
      break;
    }
    case OpType::kAlltoall:
      args.splits = alltoall_splits(set, args);
      q.splits = args.splits;
      break;
    case OpType::kAllgather:
    case OpType::kBarrier:
    case OpType::kJoin:
      break;
  }
  return q;
}

}  // namespace hora
