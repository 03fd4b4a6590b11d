#include "net/codec.h"

namespace hora::net {

void store_u32_le(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint32_t load_u32_le(const uint8_t* in) {
  return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 | uint32_t{in[3]} << 24;
}

DecodeError::DecodeError(const std::string& subject, const std::string& detail)
    : Internal("malformed " + subject + ": " + detail), detail_(detail) {}

void ByteWriter::put_raw(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  bytes_.insert(bytes_.end(), p, p + n);
}

void ByteWriter::put_bytes(const void* data, size_t n) {
  put<uint32_t>(static_cast<uint32_t>(n));
  put_raw(data, n);
}

const uint8_t* ByteReader::take(size_t n, const char* what) {
  if (n > remaining()) fail(std::string(what) + ": truncated");
  const uint8_t* p = bytes_.data() + pos_;
  pos_ += n;
  return p;
}

std::string ByteReader::get_string(const char* what, uint32_t limit) {
  const uint32_t n = get<uint32_t>(what);
  if (n > limit) {
    fail(std::string(what) + " of " + std::to_string(n) + " bytes exceeds " + std::to_string(limit) + " bytes");
  }
  const uint8_t* p = take(n, what);
  return std::string(reinterpret_cast<const char*>(p), n);
}

std::vector<uint8_t> ByteReader::get_bytes(const char* what, uint32_t limit) {
  const uint32_t n = get<uint32_t>(what);
  if (n > limit) {
    fail(std::string(what) + " of " + std::to_string(n) + " bytes exceeds " + std::to_string(limit) + " bytes");
  }
  const uint8_t* p = take(n, what);
  return std::vector<uint8_t>(p, p + n);
}

void ByteReader::expect_end() const {
  if (pos_ != bytes_.size()) fail(std::to_string(bytes_.size() - pos_) + " trailing bytes");
}

void ByteReader::fail(const std::string& detail) const { throw DecodeError(subject_, detail); }

}  // namespace hora::net
