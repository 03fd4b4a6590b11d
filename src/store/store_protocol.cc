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

// Bounds-checked reader; an overrun means the peer broke the protocol. A
// reader of replies throws Internal, a reader of requests (`refuse`) throws
// a Refusal.
class Reader {
 public:
  Reader(const std::vector<uint8_t>& data, const char* what, bool refuse = false)
      : data_(data), what_(what), refuse_(refuse) {}
  uint8_t u8() { return take(1)[0]; }
  uint16_t u16() {
    const uint8_t* p = take(2);
    return static_cast<uint16_t>(p[0] | p[1] << 8);
  }
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
  // A u32 length, at most `limit`, then that many bytes.
  std::vector<uint8_t> sized(size_t limit, const char* what) {
    const uint32_t n = u32();
    if (n > limit) {
      fail(std::string(what) + " of " + std::to_string(n) + " bytes exceeds " + std::to_string(limit) + " bytes");
    }
    const uint8_t* p = take(n);
    return {p, p + n};
  }
  [[noreturn]] void fail(const std::string& why) const {
    if (refuse_) throw Refusal{Status::kBadRequest, std::string(what_) + ": " + why};
    throw Internal(std::string("malformed ") + what_ + " from the rendezvous server: " + why);
  }

 private:
  const std::vector<uint8_t>& data_;
  const char* what_;
  const bool refuse_;
  size_t pos_ = 0;
};

bool same_secret(const uint8_t* given, size_t length, const std::string& secret) {
  if (length != secret.size()) return false;
  uint8_t diff = 0;  // constant time in the secret's length
  for (size_t i = 0; i < length; ++i) diff |= given[i] ^ static_cast<uint8_t>(secret[i]);
  return diff == 0;
}

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

Request decode_request(const std::vector<uint8_t>& payload, const std::string& secret) {
  Reader r(payload, "request", /*refuse=*/true);
  const uint8_t version = r.u8();
  const uint8_t command = r.u8();
  if (version != kVersion) r.fail("unsupported protocol version " + std::to_string(version));
  const uint16_t secret_length = r.u16();
  if (secret_length > kMaxSecretBytes) r.fail("secret is too long");
  const uint8_t* given = r.take(secret_length);
  if (secret_length == 0 || !same_secret(given, secret_length, secret)) {
    throw Refusal{Status::kBadSecret, "missing or wrong job secret"};
  }
  if (command < static_cast<uint8_t>(Command::kSet) || command > static_cast<uint8_t>(Command::kPing)) {
    r.fail("unknown command " + std::to_string(command));
  }
  Request request;
  request.command = static_cast<Command>(command);
  request.timeout_ms = r.u32();
  const uint32_t count = r.u32();
  if (count > kMaxWaitKeys) r.fail(std::to_string(count) + " keys exceed the limit of " + std::to_string(kMaxWaitKeys));
  for (uint32_t i = 0; i < count; ++i) {
    std::vector<uint8_t> key = r.sized(kMaxKeyBytes, "key");
    request.keys.emplace_back(key.begin(), key.end());
  }
  request.value = r.sized(kMaxValueBytes, "value");
  r.expect_end();
  const bool ping = request.command == Command::kPing;
  const size_t least = ping ? 0 : 1;
  const size_t most = ping ? 0 : request.command == Command::kWait ? kMaxWaitKeys : 1;
  if (count < least || count > most) {
    r.fail("command " + std::to_string(command) + " takes " + std::to_string(least) + ".." + std::to_string(most) +
           " keys, got " + std::to_string(count));
  }
  return request;
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
