// Element types, float16/bfloat16 conversions and the reduction kernels,
// checked against a reference computed in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/half.h"
#include "core/reduce.h"
#include "hora/errors.h"
#include "hora/types.h"

namespace hora {
namespace {

constexpr DataType kAllDataTypes[] = {
    DataType::kUInt8,   DataType::kInt8,     DataType::kUInt16,  DataType::kInt16,   DataType::kInt32,
    DataType::kInt64,   DataType::kFloat16,  DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
    DataType::kBool};
static_assert(std::size(kAllDataTypes) == kNumDataTypes);
// The element-wise reductions (Adasum is not one; see test_adasum.cc).
constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                      ReduceOp::kProduct};
constexpr int kFp16Mantissa = 10;
constexpr int kBf16Mantissa = 7;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Rounds `value` to nearest even in a binary format with `mantissa` stored
// bits and `exponent_bits` exponent bits (float16: 10/5, bfloat16: 7/8).
double round_to_format(double value, int mantissa, int exponent_bits) {
  if (value == 0 || !std::isfinite(value)) return value;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int exponent = std::max(std::ilogb(value), 1 - bias);
  const double quantum = std::ldexp(1.0, exponent - mantissa);
  const double rounded = std::nearbyint(value / quantum) * quantum;
  const double largest = std::ldexp(2.0 - std::ldexp(1.0, -mantissa), bias);
  return std::fabs(rounded) > largest ? std::copysign(kInf, value) : rounded;
}
double round_fp16(double value) { return round_to_format(value, kFp16Mantissa, 5); }
double round_bf16(double value) { return round_to_format(value, kBf16Mantissa, 8); }

// The value of 16-bit pattern `bits` in a format with `mantissa` stored bits.
double decode_bits(uint16_t bits, int mantissa) {
  const int exponent_bits = 15 - mantissa;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int exponent = (bits >> mantissa) & ((1 << exponent_bits) - 1);
  const int fraction = bits & ((1 << mantissa) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == (1 << exponent_bits) - 1) {
    return fraction ? std::numeric_limits<double>::quiet_NaN() : sign * kInf;
  }
  if (exponent == 0) return sign * std::ldexp(fraction, 1 - bias - mantissa);
  return sign * std::ldexp(fraction + (1 << mantissa), exponent - bias - mantissa);
}

template <typename T>
void put(std::vector<unsigned char>& buf, size_t i, T value) {
  std::memcpy(buf.data() + i * sizeof(T), &value, sizeof(T));
}
template <typename T>
T get(const std::vector<unsigned char>& buf, size_t i) {
  T value;
  std::memcpy(&value, buf.data() + i * sizeof(T), sizeof(T));
  return value;
}

// Writes `value` (already representable in `dtype`) as element i.
void store(DataType dtype, std::vector<unsigned char>& buf, size_t i, double value) {
  switch (dtype) {
    case DataType::kUInt8: return put<uint8_t>(buf, i, static_cast<uint8_t>(value));
    case DataType::kInt8: return put<int8_t>(buf, i, static_cast<int8_t>(value));
    case DataType::kUInt16: return put<uint16_t>(buf, i, static_cast<uint16_t>(value));
    case DataType::kInt16: return put<int16_t>(buf, i, static_cast<int16_t>(value));
    case DataType::kInt32: return put<int32_t>(buf, i, static_cast<int32_t>(value));
    case DataType::kInt64: return put<int64_t>(buf, i, static_cast<int64_t>(value));
    case DataType::kFloat16: return put<uint16_t>(buf, i, float_to_fp16(static_cast<float>(value)));
    case DataType::kBFloat16: return put<uint16_t>(buf, i, float_to_bf16(static_cast<float>(value)));
    case DataType::kFloat32: return put<float>(buf, i, static_cast<float>(value));
    case DataType::kFloat64: return put<double>(buf, i, value);
    case DataType::kBool: return put<uint8_t>(buf, i, static_cast<uint8_t>(value));
  }
}

// Element i as a double; bool gives the raw byte.
double load(DataType dtype, const std::vector<unsigned char>& buf, size_t i) {
  switch (dtype) {
    case DataType::kUInt8: return get<uint8_t>(buf, i);
    case DataType::kInt8: return get<int8_t>(buf, i);
    case DataType::kUInt16: return get<uint16_t>(buf, i);
    case DataType::kInt16: return get<int16_t>(buf, i);
    case DataType::kInt32: return get<int32_t>(buf, i);
    case DataType::kInt64: return static_cast<double>(get<int64_t>(buf, i));
    case DataType::kFloat16: return decode_bits(get<uint16_t>(buf, i), kFp16Mantissa);
    case DataType::kBFloat16: return decode_bits(get<uint16_t>(buf, i), kBf16Mantissa);
    case DataType::kFloat32: return get<float>(buf, i);
    case DataType::kFloat64: return get<double>(buf, i);
    case DataType::kBool: return get<uint8_t>(buf, i);
  }
  return 0;
}

// Operands keep products exact in double and, for 16-bit floats, sums and
// products exact in float, so the kernel rounds once, as the reference does.
// bool operands include non-canonical true bytes.
double random_operand(DataType dtype, std::mt19937& rng) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return static_cast<double>(std::uniform_int_distribution<int64_t>(lo, hi)(rng));
  };
  switch (dtype) {
    case DataType::kUInt8: return uniform(0, 15);
    case DataType::kInt8: return uniform(-11, 11);
    case DataType::kUInt16: return uniform(0, 255);
    case DataType::kInt16: return uniform(-181, 181);
    case DataType::kInt32: return uniform(-40000, 40000);
    case DataType::kInt64: return uniform(-30000000, 30000000);
    case DataType::kFloat16: return round_fp16(uniform(-1600, 1600) / 16);
    case DataType::kBFloat16: return round_bf16(uniform(-1600, 1600) / 16);
    case DataType::kFloat32:
    case DataType::kFloat64: return uniform(-1600, 1600) / 16;
    case DataType::kBool: return std::array<double, 4>{0, 1, 2, 255}[uniform(0, 3)];
  }
  return 0;
}

double reference(DataType dtype, ReduceOp op, double a, double b) {
  if (dtype == DataType::kBool) a = a != 0, b = b != 0;
  double exact = 0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: exact = a + b; break;
    case ReduceOp::kMin: exact = std::min(a, b); break;
    case ReduceOp::kMax: exact = std::max(a, b); break;
    case ReduceOp::kProduct: exact = a * b; break;
    case ReduceOp::kAdasum: ADD_FAILURE() << "Adasum is not element-wise"; break;
  }
  switch (dtype) {
    case DataType::kFloat16: return round_fp16(exact);
    case DataType::kBFloat16: return round_bf16(exact);
    case DataType::kFloat32: return static_cast<float>(exact);
    case DataType::kBool: return exact != 0 ? 1 : 0;
    default: return exact;
  }
}

using ReduceCase = std::tuple<DataType, ReduceOp, size_t>;
class ReduceIntoTest : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceIntoTest, MatchesDoubleReferenceAndLeavesTheRestAlone) {
  const auto [dtype, op, count] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(count) * 131 + static_cast<unsigned>(dtype) * 7 + static_cast<unsigned>(op));
  // One element past `count` in each buffer must stay untouched.
  std::vector<unsigned char> inout((count + 1) * dtype_size(dtype));
  std::vector<unsigned char> in(inout.size());
  std::vector<double> expected(count + 1);
  for (size_t i = 0; i <= count; ++i) {
    const double a = random_operand(dtype, rng);
    const double b = random_operand(dtype, rng);
    store(dtype, inout, i, a);
    store(dtype, in, i, b);
    expected[i] = i < count ? reference(dtype, op, a, b) : a;
  }
  reduce_into(inout.data(), in.data(), count, dtype, op);
  for (size_t i = 0; i <= count; ++i) {
    ASSERT_EQ(load(dtype, inout, i), expected[i]) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceIntoTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDataTypes), ::testing::ValuesIn(kAllReduceOps),
                                            ::testing::Values<size_t>(0, 1, 7, 33, 1000)),
                         [](const ::testing::TestParamInfo<ReduceCase>& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  std::string(reduce_op_name(std::get<1>(info.param))) + "_" +
                                  std::to_string(std::get<2>(info.param));
                         });

TEST(ReduceInto, IntegerSumsWrapAround) {
  int8_t small[] = {100, -100};
  const int8_t small_in[] = {100, -100};
  reduce_into(small, small_in, 2, DataType::kInt8, ReduceOp::kSum);
  EXPECT_EQ(small[0], -56);
  EXPECT_EQ(small[1], 56);
  int32_t large[] = {std::numeric_limits<int32_t>::max()};
  const int32_t one[] = {1};
  reduce_into(large, one, 1, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(large[0], std::numeric_limits<int32_t>::min());
  int16_t i16[] = {30000, -30000};
  const int16_t i16_in[] = {30000, -30000};
  reduce_into(i16, i16_in, 2, DataType::kInt16, ReduceOp::kSum);
  EXPECT_EQ(i16[0], -5536);
  EXPECT_EQ(i16[1], 5536);
  uint16_t u16[] = {65535};
  const uint16_t u16_in[] = {2};
  reduce_into(u16, u16_in, 1, DataType::kUInt16, ReduceOp::kSum);
  EXPECT_EQ(u16[0], 1);
}

TEST(ReduceInto, SixteenBitProductsWrapAround) {
  // 65535 * 65535 overflows int, to which uint16 operands would promote.
  uint16_t u16[] = {65535, 256};
  const uint16_t u16_in[] = {65535, 256};
  reduce_into(u16, u16_in, 2, DataType::kUInt16, ReduceOp::kProduct);
  EXPECT_EQ(u16[0], 1);
  EXPECT_EQ(u16[1], 0);
  int16_t i16[] = {-32768, 300};
  const int16_t i16_in[] = {-1, 300};
  reduce_into(i16, i16_in, 2, DataType::kInt16, ReduceOp::kProduct);
  EXPECT_EQ(i16[0], -32768);
  EXPECT_EQ(i16[1], static_cast<int16_t>(90000 - 65536));
}

TEST(ReduceInto, SixteenBitIntegersMinAndMaxCompareAsTheirType) {
  uint16_t u16[] = {65535, 1};
  const uint16_t u16_in[] = {1, 65535};
  reduce_into(u16, u16_in, 2, DataType::kUInt16, ReduceOp::kMax);
  EXPECT_EQ(u16[0], 65535);
  EXPECT_EQ(u16[1], 65535);
  int16_t i16[] = {-32768, 32767};
  const int16_t i16_in[] = {5, -5};
  reduce_into(i16, i16_in, 2, DataType::kInt16, ReduceOp::kMin);
  EXPECT_EQ(i16[0], -32768);
  EXPECT_EQ(i16[1], -5);
}

TEST(ReduceInto, Int64IsExactBeyondDoublePrecision) {
  const int64_t big = (int64_t{1} << 62) + 1;
  int64_t sum[] = {big};
  const int64_t addend[] = {12345};
  reduce_into(sum, addend, 1, DataType::kInt64, ReduceOp::kSum);
  EXPECT_EQ(sum[0], big + 12345);
  int64_t product[] = {(int64_t{1} << 40) + 3};
  const int64_t factor[] = {(int64_t{1} << 20) + 1};
  reduce_into(product, factor, 1, DataType::kInt64, ReduceOp::kProduct);
  EXPECT_EQ(product[0], ((int64_t{1} << 40) + 3) * ((int64_t{1} << 20) + 1));
}

TEST(ReduceInto, UnknownTypeOrOpThrowsInternal) {
  float inout[1] = {1};
  const float in[1] = {2};
  EXPECT_THROW(reduce_into(inout, in, 1, static_cast<DataType>(kNumDataTypes), ReduceOp::kSum), Internal);
  EXPECT_THROW(reduce_into(inout, in, 1, DataType::kFloat32, static_cast<ReduceOp>(kNumReduceOps)), Internal);
  // Adasum is a collective of its own, never an element-wise kernel.
  EXPECT_THROW(reduce_into(inout, in, 1, DataType::kFloat32, ReduceOp::kAdasum), Internal);
  EXPECT_EQ(inout[0], 1.0f);
}

struct KnownConversion {
  float value;
  uint16_t bits;
};

// reduce_into_after(inout, first) gives the bits of reducing `first` with
// inout's values in that order (two members of a pair each compute the
// lower rank's first): NaNs in Min and Max show the order, every type and
// op alike.
TEST(ReduceIntoAfter, GivesTheBitsOfTheFirstOperandReducedWithTheSecond) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> first = {nan, 1.0f, 5.0f, -0.0f, 1e8f};
  const std::vector<float> second = {1.0f, nan, 2.0f, 0.0f, 1.0f};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    std::vector<float> expected = first;
    reduce_into(expected.data(), second.data(), first.size(), DataType::kFloat32, op);
    std::vector<float> in_place = second;
    reduce_into_after(in_place.data(), first.data(), first.size(), DataType::kFloat32, op);
    EXPECT_EQ(std::memcmp(in_place.data(), expected.data(), sizeof(float) * first.size()), 0)
        << "op " << static_cast<int>(op);
  }
  std::vector<float> min_of = {1.0f};
  reduce_into_after(min_of.data(), &nan, 1, DataType::kFloat32, ReduceOp::kMin);
  EXPECT_TRUE(std::isnan(min_of[0])) << "the NaN came first and stays";
  for (DataType dtype : {DataType::kInt8, DataType::kUInt16, DataType::kInt32, DataType::kInt64, DataType::kFloat16,
                         DataType::kBFloat16, DataType::kFloat64, DataType::kBool}) {
    const size_t bytes = 8 * dtype_size(dtype);
    std::vector<uint8_t> a(bytes), b(bytes);
    for (size_t i = 0; i < bytes; ++i) {
      a[i] = static_cast<uint8_t>(dtype == DataType::kBool ? i % 2 : 37 * i + 11);
      b[i] = static_cast<uint8_t>(dtype == DataType::kBool ? i % 3 == 0 : 91 * i + 5);
    }
    std::vector<uint8_t> expected = a, in_place = b;
    reduce_into(expected.data(), b.data(), 8, dtype, ReduceOp::kMax);
    reduce_into_after(in_place.data(), a.data(), 8, dtype, ReduceOp::kMax);
    EXPECT_EQ(in_place, expected) << "dtype " << static_cast<int>(dtype);
  }
}

TEST(Float16, KnownValuesRoundTrip) {
  const KnownConversion cases[] = {
      {1.0f, 0x3c00},       {-2.5f, 0xc100},           {65504.0f, 0x7bff},         {0x1p-24f, 0x0001},
      {0x1p-14f, 0x0400},   {1023 * 0x1p-24f, 0x03ff}, {0.0f, 0x0000},             {-0.0f, 0x8000},
      {INFINITY, 0x7c00}, {-INFINITY, 0xfc00}};
  for (const auto& c : cases) {
    EXPECT_EQ(float_to_fp16(c.value), c.bits) << c.value;
    EXPECT_EQ(std::bit_cast<uint32_t>(fp16_to_float(c.bits)), std::bit_cast<uint32_t>(c.value)) << c.value;
  }
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(NAN))));
  // A NaN whose payload lies only in bits float16 drops must not become inf.
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::bit_cast<float>(0x7f800001u)))));
}

TEST(Float16, RoundsToNearestEven) {
  const KnownConversion cases[] = {
      {1 + 0x1p-11f, 0x3c00},          {1 + 3 * 0x1p-11f, 0x3c02},  {1 + 0x1p-11f + 0x1p-20f, 0x3c01},
      {-1 - 0x1p-11f, 0xbc00},         {65519.0f, 0x7bff},          {65520.0f, 0x7c00},
      {0x1p-25f, 0x0000},              {1.5f * 0x1p-25f, 0x0001},   {3 * 0x1p-25f, 0x0002},
      {1023.5f * 0x1p-24f, 0x0400}};
  for (const auto& c : cases) EXPECT_EQ(float_to_fp16(c.value), c.bits) << c.value;
}

TEST(BFloat16, KnownValuesRoundTrip) {
  const KnownConversion cases[] = {{1.0f, 0x3f80},   {-2.5f, 0xc020},      {65536.0f, 0x4780},
                                   {0x1p-133f, 0x0001}, {0x1p-126f, 0x0080}, {-0.0f, 0x8000},
                                   {INFINITY, 0x7f80}, {-INFINITY, 0xff80}};
  for (const auto& c : cases) {
    EXPECT_EQ(float_to_bf16(c.value), c.bits) << c.value;
    EXPECT_EQ(std::bit_cast<uint32_t>(bf16_to_float(c.bits)), std::bit_cast<uint32_t>(c.value)) << c.value;
  }
  EXPECT_EQ(float_to_bf16(65504.0f), 0x4780);  // not representable: rounds up to 65536
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::bit_cast<float>(0x7f800001u)))));
}

TEST(BFloat16, RoundsToNearestEven) {
  const KnownConversion cases[] = {{1 + 0x1p-8f, 0x3f80},
                                   {1 + 3 * 0x1p-8f, 0x3f82},
                                   {1 + 0x1p-8f + 0x1p-20f, 0x3f81},
                                   {std::numeric_limits<float>::max(), 0x7f80}};
  for (const auto& c : cases) EXPECT_EQ(float_to_bf16(c.value), c.bits) << c.value;
}

// Every 16-bit pattern decodes to the reference value and encodes back to
// itself; random floats over the whole range round like the reference.
void check_format(float (*to_float)(uint16_t), uint16_t (*from_float)(float), int mantissa,
                  double (*round)(double), float range) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = to_float(static_cast<uint16_t>(bits));
    const double expected = decode_bits(static_cast<uint16_t>(bits), mantissa);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(value)) << bits;
      ASSERT_TRUE(std::isnan(to_float(from_float(value)))) << bits;
    } else {
      ASSERT_EQ(value, expected) << bits;
      ASSERT_EQ(from_float(value), bits) << bits;
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-30, std::log2(range));
  for (int i = 0; i < 200000; ++i) {
    const float value = (i % 2 ? -1.0f : 1.0f) * std::exp2(exponent(rng));
    ASSERT_EQ(decode_bits(from_float(value), mantissa), round(value)) << value;
  }
}

TEST(Float16, MatchesReferenceOverEveryPattern) {
  check_format(fp16_to_float, float_to_fp16, kFp16Mantissa, round_fp16, 70000.0f);
}

TEST(BFloat16, MatchesReferenceOverEveryPattern) {
  check_format(bf16_to_float, float_to_bf16, kBf16Mantissa, round_bf16, 1e38f);
}

TEST(ScaleBuffer, FloatTypesMultiply) {
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    const size_t count = 37;
    std::vector<unsigned char> buf(count * dtype_size(dtype));
    for (size_t i = 0; i < count; ++i) store(dtype, buf, i, (static_cast<double>(i) - 18) * 0.75);
    scale_buffer(buf.data(), count, dtype, 0.25);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(load(dtype, buf, i), (static_cast<double>(i) - 18) * 0.1875) << dtype_name(dtype) << " " << i;
    }
  }
}

TEST(ScaleBuffer, HalfTypesRoundToNearestEven) {
  // 1 * (1 + half an ulp) ties down to 1; 2 * (1 + 1.5 ulps) ties up to 2 + 2 ulps.
  uint16_t fp16[] = {float_to_fp16(1.0f), float_to_fp16(2.0f)};
  scale_buffer(fp16, 1, DataType::kFloat16, 1 + 0x1p-11);
  scale_buffer(fp16 + 1, 1, DataType::kFloat16, 1 + 3 * 0x1p-11);
  EXPECT_EQ(fp16[0], 0x3c00);
  EXPECT_EQ(fp16[1], 0x4002);
  uint16_t bf16[] = {float_to_bf16(1.0f), float_to_bf16(2.0f)};
  scale_buffer(bf16, 1, DataType::kBFloat16, 1 + 0x1p-8);
  scale_buffer(bf16 + 1, 1, DataType::kBFloat16, 1 + 3 * 0x1p-8);
  EXPECT_EQ(bf16[0], 0x3f80);
  EXPECT_EQ(bf16[1], 0x4002);
}

TEST(ScaleBuffer, IntegersTruncateTowardZero) {
  int32_t i32[] = {7, -7, 10, 0, 1};
  scale_buffer(i32, 5, DataType::kInt32, 0.5);
  EXPECT_EQ(std::vector<int32_t>(i32, i32 + 5), (std::vector<int32_t>{3, -3, 5, 0, 0}));
  int8_t i8[] = {-128, 127, -3};
  scale_buffer(i8, 3, DataType::kInt8, 0.5);
  EXPECT_EQ(std::vector<int8_t>(i8, i8 + 3), (std::vector<int8_t>{-64, 63, -1}));
  uint8_t u8[] = {255, 3, 1};
  scale_buffer(u8, 3, DataType::kUInt8, 0.5);
  EXPECT_EQ(std::vector<uint8_t>(u8, u8 + 3), (std::vector<uint8_t>{127, 1, 0}));
  uint16_t u16[] = {65535, 3};
  scale_buffer(u16, 2, DataType::kUInt16, 0.5);
  EXPECT_EQ(std::vector<uint16_t>(u16, u16 + 2), (std::vector<uint16_t>{32767, 1}));
  int16_t i16[] = {-32768, 32767, -3};
  scale_buffer(i16, 3, DataType::kInt16, 0.5);
  EXPECT_EQ(std::vector<int16_t>(i16, i16 + 3), (std::vector<int16_t>{-16384, 16383, -1}));
  int64_t i64[] = {-9, 1000000000000003, 10};
  scale_buffer(i64, 3, DataType::kInt64, 0.25);
  EXPECT_EQ(std::vector<int64_t>(i64, i64 + 3), (std::vector<int64_t>{-2, 250000000000000, 2}));
  int32_t average[] = {10, -10};  // Average over 3 processes
  scale_buffer(average, 2, DataType::kInt32, 1.0 / 3);
  EXPECT_EQ(average[0], 3);
  EXPECT_EQ(average[1], -3);
}

TEST(ScaleBuffer, IntegersSaturateOutsideTheirRange) {
  int8_t i8[] = {100, -100};
  scale_buffer(i8, 2, DataType::kInt8, 2.0);
  EXPECT_EQ(i8[0], 127);
  EXPECT_EQ(i8[1], -128);
  uint8_t u8[] = {5};
  scale_buffer(u8, 1, DataType::kUInt8, -1.0);
  EXPECT_EQ(u8[0], 0);
  int16_t i16[] = {20000, -20000};
  scale_buffer(i16, 2, DataType::kInt16, 2.0);
  EXPECT_EQ(i16[0], 32767);
  EXPECT_EQ(i16[1], -32768);
  uint16_t u16[] = {40000, 7};
  scale_buffer(u16, 2, DataType::kUInt16, 2.0);
  EXPECT_EQ(u16[0], 65535);
  scale_buffer(u16 + 1, 1, DataType::kUInt16, -1.0);
  EXPECT_EQ(u16[1], 0);
}

TEST(ScaleBuffer, BoolThrowsInvalidArgument) {
  uint8_t flags[] = {1, 0};
  try {
    scale_buffer(flags, 2, DataType::kBool, 0.5);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "scale factors are not supported for bool tensors");
  }
  EXPECT_EQ(flags[0], 1);
}

TEST(Types, SizeAndNameOfEveryDataType) {
  const std::tuple<DataType, size_t, const char*> cases[] = {
      {DataType::kUInt8, 1, "uint8"},       {DataType::kInt8, 1, "int8"},       {DataType::kUInt16, 2, "uint16"},
      {DataType::kInt16, 2, "int16"},       {DataType::kInt32, 4, "int32"},
      {DataType::kInt64, 8, "int64"},       {DataType::kFloat16, 2, "float16"}, {DataType::kBFloat16, 2, "bfloat16"},
      {DataType::kFloat32, 4, "float32"},   {DataType::kFloat64, 8, "float64"}, {DataType::kBool, 1, "bool"}};
  for (const auto& [dtype, size, name] : cases) {
    EXPECT_EQ(dtype_size(dtype), size) << name;
    EXPECT_EQ(dtype_name(dtype), name);
    EXPECT_TRUE(is_valid_dtype(static_cast<uint8_t>(dtype))) << name;
  }
  EXPECT_EQ(static_cast<int>(DataType::kUInt16), 9) << "wire value";
  EXPECT_EQ(static_cast<int>(DataType::kInt16), 10) << "wire value";
  EXPECT_FALSE(is_valid_dtype(11));
  EXPECT_FALSE(is_valid_dtype(255));
  EXPECT_THROW(dtype_size(static_cast<DataType>(11)), Internal);
  EXPECT_THROW(dtype_name(static_cast<DataType>(11)), Internal);
}

TEST(Types, NameOfEveryReduceOp) {
  const char* names[] = {"Sum", "Average", "Min", "Max", "Product", "Adasum"};
  static_assert(std::size(names) == kNumReduceOps);
  for (int i = 0; i < kNumReduceOps; ++i) {
    EXPECT_EQ(reduce_op_name(static_cast<ReduceOp>(i)), names[i]);
    EXPECT_TRUE(is_valid_reduce_op(static_cast<uint8_t>(i)));
  }
  EXPECT_EQ(static_cast<int>(ReduceOp::kAdasum), 5) << "wire value";
  EXPECT_FALSE(is_valid_reduce_op(6));
  EXPECT_THROW(reduce_op_name(static_cast<ReduceOp>(6)), Internal);
}

}  // namespace
}  // namespace hora
