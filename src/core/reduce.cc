// Element-wise reduction and scaling kernels.
//
// An element type is described by a storage type (what lies in the buffer), a
// compute type (what the arithmetic runs in) and load/store conversions
// between them. For float32, float64 and the integers both are the same type
// and the conversions are the identity, so every kernel compiles to a plain
// loop over __restrict pointers that the compiler vectorises. float16 and
// bfloat16 store 16 bits, compute in float and round back to nearest even.
// bool stores one byte, computes in bool and stores 0 or 1.
//
// Loops run in blocks of kBlock elements with a fixed-length inner loop, then
// a scalar tail: GCC's default cost model at -O2 only vectorises loops whose
// trip count is a known multiple of the vector width.
#include "core/reduce.h"

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "core/half.h"
#include "hora/errors.h"

namespace hora {
namespace {

constexpr size_t kBlock = 16;

template <typename T>
struct Plain {
  using Storage = T;
  using Compute = T;
  static T load(T value) { return value; }
  static T store(T value) { return value; }
};

struct Float16 {
  using Storage = uint16_t;
  using Compute = float;
  static float load(uint16_t bits) { return fp16_to_float(bits); }
  static uint16_t store(float value) { return float_to_fp16(value); }
};

struct BFloat16 {
  using Storage = uint16_t;
  using Compute = float;
  static float load(uint16_t bits) { return bf16_to_float(bits); }
  static uint16_t store(float value) { return float_to_bf16(value); }
};

struct Bool {
  using Storage = uint8_t;
  using Compute = bool;
  static bool load(uint8_t byte) { return byte != 0; }
  static uint8_t store(bool value) { return value ? 1 : 0; }
};

// Integer sums and products wrap around (two's complement) like the
// framework tensors they come from, instead of being undefined behaviour.
// They run in an unsigned type at least as wide as int: 16-bit operands
// would otherwise be promoted to (signed) int, where 65535 * 65535
// overflows.
template <typename T>
constexpr bool kWrapsAround = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T>
using Wrapping = std::make_unsigned_t<std::common_type_t<T, int>>;

struct SumOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (kWrapsAround<T>) {
      using U = Wrapping<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else if constexpr (std::is_same_v<T, bool>) {
      return a || b;
    } else {
      return a + b;
    }
  }
};

struct ProductOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (kWrapsAround<T>) {
      using U = Wrapping<T>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else if constexpr (std::is_same_v<T, bool>) {
      return a && b;
    } else {
      return a * b;
    }
  }
};

// Min and Max use plain comparisons (the form that maps onto SIMD min/max), so
// a NaN is kept when it is in `a` (inout) and dropped when it is in `b`. On
// bool, Min is logical and, Max logical or.
struct MinOp {
  template <typename T>
  static T apply(T a, T b) { return b < a ? b : a; }
};

struct MaxOp {
  template <typename T>
  static T apply(T a, T b) { return a < b ? b : a; }
};

// inout[i] = op(inout[i], in[i]) for i < count, in the element's compute
// type; with `in_first`, op(in[i], inout[i]).
template <typename Op, typename Element, bool in_first>
void combine_span(typename Element::Storage* __restrict inout,
                  const typename Element::Storage* __restrict in, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if constexpr (in_first) inout[i] = Element::store(Op::apply(Element::load(in[i]), Element::load(inout[i])));
    else inout[i] = Element::store(Op::apply(Element::load(inout[i]), Element::load(in[i])));
  }
}

template <typename Op, typename Element, bool in_first>
void combine(typename Element::Storage* inout, const typename Element::Storage* in,
             size_t count) {
  size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) combine_span<Op, Element, in_first>(inout + i, in + i, kBlock);
  combine_span<Op, Element, in_first>(inout + i, in + i, count - i);
}

template <typename Element, bool in_first>
void reduce_element(void* inout, const void* in, size_t count, ReduceOp op) {
  using Storage = typename Element::Storage;
  auto* out = static_cast<Storage*>(inout);
  const auto* src = static_cast<const Storage*>(in);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return combine<SumOp, Element, in_first>(out, src, count);
    case ReduceOp::kMin:
      return combine<MinOp, Element, in_first>(out, src, count);
    case ReduceOp::kMax:
      return combine<MaxOp, Element, in_first>(out, src, count);
    case ReduceOp::kProduct:
      return combine<ProductOp, Element, in_first>(out, src, count);
    case ReduceOp::kAdasum:
      throw Internal("Adasum is not an element-wise reduction; collectives/adasum.h runs it");
  }
  throw Internal("unknown ReduceOp " + std::to_string(static_cast<int>(op)));
}

// buf[i] *= factor in the element's compute type (float for float16/bfloat16).
template <typename Element>
void scale_span(typename Element::Storage* __restrict buf, size_t count,
                typename Element::Compute factor) {
  for (size_t i = 0; i < count; ++i) buf[i] = Element::store(Element::load(buf[i]) * factor);
}

template <typename Element>
void scale_float(void* buf, size_t count, double factor) {
  auto* data = static_cast<typename Element::Storage*>(buf);
  const auto f = static_cast<typename Element::Compute>(factor);
  size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) scale_span<Element>(data + i, kBlock, f);
  scale_span<Element>(data + i, count - i, f);
}

// Truncates toward zero; values outside T's range saturate and NaN becomes 0,
// where a bare static_cast would be undefined behaviour.
template <typename T>
T truncate_to(double value) {
  constexpr double kLowest = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double kHighest = static_cast<double>(std::numeric_limits<T>::max());
  if (value != value) return 0;
  if (value <= kLowest) return std::numeric_limits<T>::min();
  if (value >= kHighest) return std::numeric_limits<T>::max();
  return static_cast<T>(value);
}

template <typename T>
void scale_integer(void* buf, size_t count, double factor) {
  auto* __restrict data = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) {
    data[i] = truncate_to<T>(static_cast<double>(data[i]) * factor);
  }
}

}  // namespace

namespace {

template <bool in_first>
void reduce_typed(void* inout, const void* in, size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kUInt8: return reduce_element<Plain<uint8_t>, in_first>(inout, in, count, op);
    case DataType::kInt8: return reduce_element<Plain<int8_t>, in_first>(inout, in, count, op);
    case DataType::kUInt16: return reduce_element<Plain<uint16_t>, in_first>(inout, in, count, op);
    case DataType::kInt16: return reduce_element<Plain<int16_t>, in_first>(inout, in, count, op);
    case DataType::kInt32: return reduce_element<Plain<int32_t>, in_first>(inout, in, count, op);
    case DataType::kInt64: return reduce_element<Plain<int64_t>, in_first>(inout, in, count, op);
    case DataType::kFloat16: return reduce_element<Float16, in_first>(inout, in, count, op);
    case DataType::kBFloat16: return reduce_element<BFloat16, in_first>(inout, in, count, op);
    case DataType::kFloat32: return reduce_element<Plain<float>, in_first>(inout, in, count, op);
    case DataType::kFloat64: return reduce_element<Plain<double>, in_first>(inout, in, count, op);
    case DataType::kBool: return reduce_element<Bool, in_first>(inout, in, count, op);
  }
  throw Internal("unknown DataType " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace

void reduce_into(void* inout, const void* in, size_t count, DataType dtype, ReduceOp op) {
  reduce_typed<false>(inout, in, count, dtype, op);
}

void reduce_into_after(void* inout, const void* first, size_t count, DataType dtype, ReduceOp op) {
  reduce_typed<true>(inout, first, count, dtype, op);
}

void scale_buffer(void* buf, size_t count, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kUInt8: return scale_integer<uint8_t>(buf, count, factor);
    case DataType::kInt8: return scale_integer<int8_t>(buf, count, factor);
    case DataType::kUInt16: return scale_integer<uint16_t>(buf, count, factor);
    case DataType::kInt16: return scale_integer<int16_t>(buf, count, factor);
    case DataType::kInt32: return scale_integer<int32_t>(buf, count, factor);
    case DataType::kInt64: return scale_integer<int64_t>(buf, count, factor);
    case DataType::kFloat16: return scale_float<Float16>(buf, count, factor);
    case DataType::kBFloat16: return scale_float<BFloat16>(buf, count, factor);
    case DataType::kFloat32: return scale_float<Plain<float>>(buf, count, factor);
    case DataType::kFloat64: return scale_float<Plain<double>>(buf, count, factor);
    case DataType::kBool:
      throw InvalidArgument("scale factors are not supported for bool tensors");
  }
  throw Internal("unknown DataType " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace hora
