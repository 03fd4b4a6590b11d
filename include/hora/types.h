// Element types and reduction operations shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hora {

// Element type of a tensor. The numeric values are part of the wire format.
enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kBool = 8,
  kUInt16 = 9,
  kInt16 = 10,
};
inline constexpr int kNumDataTypes = 11;

// Reduction applied by allreduce and reducescatter. Average is Sum followed by
// a division by the process set's size. Adasum (allreduce only, float types,
// sets whose size is a power of two) combines the members' vectors pairwise
// by Horovod's adaptive summation rule. Values are part of the wire format.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  kAdasum = 5,
};
inline constexpr int kNumReduceOps = 6;

// Collective operations. Values are part of the wire format.
enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,  // this member is done; it takes part in the others' ops until all have joined
};
inline constexpr int kNumOpTypes = 7;
const char* op_type_name(OpType op);

// Size in bytes of one element of `dtype`.
size_t dtype_size(DataType dtype);
// Lower-case name: "float32", "bfloat16", ...
std::string_view dtype_name(DataType dtype);
// "Sum", "Average", ...
std::string_view reduce_op_name(ReduceOp op);
// True for the values a DataType / ReduceOp may take (used by the wire decoder).
bool is_valid_dtype(uint8_t value);
bool is_valid_reduce_op(uint8_t value);

}  // namespace hora
