#include "hora/types.h"

#include <string>

#include "hora/errors.h"

namespace hora {

namespace {

[[noreturn]] void throw_unknown(const char* what, int value) {
  throw Internal(std::string("unknown ") + what + " " + std::to_string(value));
}

}  // namespace

size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kUInt16:
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  throw_unknown("DataType", static_cast<int>(dtype));
}

std::string_view dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kUInt16: return "uint16";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBool: return "bool";
  }
  throw_unknown("DataType", static_cast<int>(dtype));
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "Sum";
    case ReduceOp::kAverage: return "Average";
    case ReduceOp::kMin: return "Min";
    case ReduceOp::kMax: return "Max";
    case ReduceOp::kProduct: return "Product";
    case ReduceOp::kAdasum: return "Adasum";
  }
  throw_unknown("ReduceOp", static_cast<int>(op));
}

bool is_valid_dtype(uint8_t value) { return value < kNumDataTypes; }

bool is_valid_reduce_op(uint8_t value) { return value < kNumReduceOps; }

}  // namespace hora
