// Conversions between float and the two 16-bit float formats hora reduces:
// IEEE binary16 ("float16") and bfloat16. Both round to nearest even; NaN
// stays NaN (quiet), infinities and subnormals are handled exactly.
#pragma once

#include <bit>
#include <cstdint>

namespace hora {

// binary16 bits -> float. Exact: every float16 value is a float.
inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  if (exponent == 0x1f) {  // inf or NaN; the payload moves to the top bits
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// float -> binary16 bits, rounding to nearest even. Values at or above 65520
// in magnitude become infinity; values at or below 2^-25 become zero.
inline uint16_t float_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // inf, or NaN forced quiet
    const uint32_t nan_bits = magnitude > 0x7f800000u ? 0x200u | ((magnitude >> 13) & 0x3ffu) : 0;
    return static_cast<uint16_t>(sign | 0x7c00u | nan_bits);
  }
  if (magnitude >= 0x477ff000u) {  // >= 65520: rounds to infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  uint32_t result;
  uint32_t dropped;
  uint32_t halfway;
  if (magnitude >= 0x38800000u) {  // >= 2^-14: normal float16
    result = (magnitude - 0x38000000u) >> 13;  // rebias 127 -> 15, keep 10 bits
    dropped = magnitude & 0x1fffu;
    halfway = 0x1000u;
  } else {
    // Subnormal float16 (or zero): count units of 2^-24. The float's value is
    // significand * 2^(exponent - 150), so shift right by 126 - exponent.
    const uint32_t exponent = magnitude >> 23;
    if (exponent < 102) return static_cast<uint16_t>(sign);  // < 2^-25
    const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    result = significand >> shift;
    dropped = significand & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  }
  // A carry out of the mantissa correctly bumps the exponent.
  if (dropped > halfway || (dropped == halfway && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}

// bfloat16 bits -> float. Exact: bfloat16 is the top half of a float.
inline float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// float -> bfloat16 bits, rounding to nearest even; NaN stays NaN (quiet).
inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace hora
