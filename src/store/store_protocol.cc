#include "store/store_protocol.h"

#include "hora/errors.h"

namespace hora::store_protocol {
namespace {

class Writer {
 public:
  void u8(uint8_t v) { bytes_.push_back(v); }
  void u16(uint16_t v) { little_endian(v, 2); }
  void u32(uint32_t v) { little_endian(v, 4); }
  void raw(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
  }
  void sized(const void* data, size_t n) {
    u32(static_cast<uint32_t>(n));
    raw(data, n);
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  void little_endian(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> bytes_;
};

// Bounds-checked reader; an overrun means the peer broke the protocol.
class Reader {
 public:
  Reader(const std::vector<uint8_t>& data, const char* what) : data_(data), what_(what) {}
  uint8_t u8() { return take(1)[0]; }
  uint32_t u32() {
    const uint8_t* p = take(4);
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  }
  const uint8_t* take(size_t n) {
    if (n > data_.size() - pos_) fail("truncated");
    const uint8_t* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }
  void expect_end() {
    if (pos_ != data_.size()) fail(std::to_string(data_.size() - pos_) + " trailing bytes");
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw Internal(std::string("malformed ") + what_ + " from the rendezvous server: " + why);
  }

 private:
  const std::vector<uint8_t>& data_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_request(const std::string& secret, const Request& request) {
  Writer w;
  w.u32(0);  // the payload length, filled in below
  w.u8(kVersion);
  w.u8(static_cast<uint8_t>(request.command));
  w.u16(static_cast<uint16_t>(secret.size()));
  w.raw(secret.data(), secret.size());
  w.u32(request.timeout_ms);
  w.u32(static_cast<uint32_t>(request.keys.size()));
  for (const std::string& key : request.keys) w.sized(key.data(), key.size());
  w.sized(request.value.data(), request.value.size());
  std::vector<uint8_t>& frame = w.bytes();
  const uint32_t payload = static_cast<uint32_t>(frame.size() - 4);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<uint8_t>(payload >> (8 * i));
  return std::move(frame);
}

Reply decode_reply(const std::vector<uint8_t>& payload) {
  Reader r(payload, "reply");
  Reply reply;
  const uint8_t status = r.u8();
  if (status > static_cast<uint8_t>(Status::kBadRequest)) r.fail("unknown status " + std::to_string(status));
  reply.status = static_cast<Status>(status);
  const uint32_t length = r.u32();
  const uint8_t* value = r.take(length);
  reply.value.assign(value, value + length);
  r.expect_end();
  return reply;
}

std::vector<uint8_t> encode_reply(const Reply& reply) {
  Writer w;
  w.u8(static_cast<uint8_t>(reply.status));
  w.sized(reply.value.data(), reply.value.size());
  return std::move(w.bytes());
}

std::vector<std::string> decode_keys(const std::vector<uint8_t>& data) {
  Reader r(data, "key list");
  const uint32_t count = r.u32();
  if (count > kMaxWaitKeys) r.fail(std::to_string(count) + " keys exceed the limit of " + std::to_string(kMaxWaitKeys));
  std::vector<std::string> keys(count);
  for (std::string& key : keys) {
    const uint32_t length = r.u32();
    if (length > kMaxKeyBytes) r.fail("a key of " + std::to_string(length) + " bytes");
    const uint8_t* p = r.take(length);
    key.assign(reinterpret_cast<const char*>(p), length);
  }
  r.expect_end();
  return keys;
}

std::vector<uint8_t> encode_keys(const std::vector<std::string>& keys) {
  Writer w;
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) w.sized(key.data(), key.size());
  return std::move(w.bytes());
}

}  // namespace hora::store_protocol
