// The one byte codec of hora's own protocols (the rendezvous store's frames,
// the control messages of a process set): fixed-width little-endian
// integers and doubles, u32-length-prefixed strings and byte runs, u32-
// counted vectors. Reading is bounds-checked and never reads out of bounds.
// No I/O.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hora/errors.h"

namespace hora::net {

// `value` as 4 little-endian bytes at `out`, and back (frame length prefixes).
void store_u32_le(uint8_t* out, uint32_t value);
uint32_t load_u32_le(const uint8_t* in);

// Input that is not a valid encoding. what() is "malformed <subject>:
// <detail>"; detail() names the field and the fault ("shape: truncated",
// "3 trailing bytes").
class DecodeError : public Internal {
 public:
  DecodeError(const std::string& subject, const std::string& detail);
  const std::string& detail() const { return detail_; }

 private:
  std::string detail_;
};

// Builds one message in memory. Not thread-safe; cheap to make.
class ByteWriter {
 public:
  // A fixed-width integer or double, little-endian.
  template <typename T>
  void put(T value) {
    static_assert(std::is_arithmetic_v<T>, "put() takes integers and doubles");
    if constexpr (std::is_floating_point_v<T>) {
      put(std::bit_cast<std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>>(value));
    } else {
      using Unsigned = std::make_unsigned_t<T>;
      const auto bits = static_cast<Unsigned>(value);
      for (size_t i = 0; i < sizeof(T); ++i) bytes_.push_back(static_cast<uint8_t>(bits >> (8 * i)));
    }
  }
  // Bytes as they are, without a length.
  void put_raw(const void* data, size_t n);
  // u32 length, then the bytes (the caller keeps n within u32).
  void put_bytes(const void* data, size_t n);
  void put_string(std::string_view s) { put_bytes(s.data(), s.size()); }
  // u32 count, then each element as put() writes it.
  template <typename T>
  void put_vector(const std::vector<T>& values) {
    put<uint32_t>(static_cast<uint32_t>(values.size()));
    for (const T& v : values) put<T>(v);
  }
  // Overwrites 4 bytes at `offset` (a length prefix written as 0 earlier).
  void patch_u32(size_t offset, uint32_t value) { store_u32_le(bytes_.data() + offset, value); }

  size_t size() const { return bytes_.size(); }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

// Reads one message from `bytes`, which must outlive it. Every read names
// the field it reads (`what`); a read past the end, an over-limit length or
// count, or fail() throws DecodeError with the reader's `subject` ("control
// message", "reply from the rendezvous server").
class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, const char* subject) : bytes_(bytes), subject_(subject) {}

  template <typename T>
  T get(const char* what) {
    static_assert(std::is_arithmetic_v<T>, "get() reads integers and doubles");
    if constexpr (std::is_floating_point_v<T>) {
      return std::bit_cast<T>(get<std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>>(what));
    } else {
      const uint8_t* p = take(sizeof(T), what);
      std::make_unsigned_t<T> bits = 0;
      for (size_t i = 0; i < sizeof(T); ++i) bits |= static_cast<std::make_unsigned_t<T>>(p[i]) << (8 * i);
      return static_cast<T>(bits);
    }
  }
  // The next `n` bytes, without a length.
  const uint8_t* take(size_t n, const char* what);
  // u32 length (at most `limit`: "<what> of N bytes exceeds LIMIT bytes"),
  // then that many bytes.
  std::string get_string(const char* what, uint32_t limit);
  std::vector<uint8_t> get_bytes(const char* what, uint32_t limit);
  // u32 count (at most `max_count`: "<what>: count N exceeds MAX"), then
  // the elements as get() reads them.
  template <typename T>
  std::vector<T> get_vector(const char* what, uint32_t max_count) {
    const uint32_t n = get<uint32_t>(what);
    if (n > max_count) fail(std::string(what) + ": count " + std::to_string(n) + " exceeds " + std::to_string(max_count));
    if (static_cast<size_t>(n) * sizeof(T) > remaining()) fail(std::string(what) + ": truncated");
    std::vector<T> values(n);
    for (T& v : values) v = get<T>(what);
    return values;
  }
  // Throws unless every byte was read ("N trailing bytes").
  void expect_end() const;
  size_t remaining() const { return bytes_.size() - pos_; }
  // Throws DecodeError with `detail`.
  [[noreturn]] void fail(const std::string& detail) const;

 private:
  std::span<const uint8_t> bytes_;
  const char* subject_;  // a string literal
  size_t pos_ = 0;
};

}  // namespace hora::net
