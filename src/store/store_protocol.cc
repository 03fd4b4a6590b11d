#include "store/store_protocol.h"

#include <cstdint>

#include "hora/errors.h"
#include "net/codec.h"

namespace hora::store_protocol {
namespace {

using net::ByteReader;
using net::ByteWriter;

// Reads a request; a malformed one is refused (BAD_REQUEST) naming the fault.
template <typename Decode>
auto refusing_malformed(Decode decode) {
  try {
    return decode();
  } catch (const net::DecodeError& e) {
    throw Refusal{Status::kBadRequest, e.what()};
  }
}

bool same_secret(const uint8_t* given, size_t length, const std::string& secret) {
  if (length != secret.size()) return false;
  uint8_t diff = 0;  // constant time in the secret's length
  for (size_t i = 0; i < length; ++i) diff |= given[i] ^ static_cast<uint8_t>(secret[i]);
  return diff == 0;
}

}  // namespace

std::vector<uint8_t> encode_request(const std::string& secret, const Request& request) {
  ByteWriter w;
  w.put<uint32_t>(0);  // the payload length, filled in below
  w.put<uint8_t>(kVersion);
  w.put<uint8_t>(static_cast<uint8_t>(request.command));
  w.put<uint16_t>(static_cast<uint16_t>(secret.size()));
  w.put_raw(secret.data(), secret.size());
  w.put<uint32_t>(request.timeout_ms);
  w.put<uint32_t>(static_cast<uint32_t>(request.keys.size()));
  for (const std::string& key : request.keys) w.put_string(key);
  w.put_bytes(request.value.data(), request.value.size());
  w.patch_u32(0, static_cast<uint32_t>(w.size() - 4));
  return w.take();
}

Request decode_request(const std::vector<uint8_t>& payload, const std::string& secret) {
  return refusing_malformed([&] {
    ByteReader r(payload, "request");
    const uint8_t version = r.get<uint8_t>("version");
    const uint8_t command = r.get<uint8_t>("command");
    if (version != kVersion) r.fail("unsupported protocol version " + std::to_string(version));
    const uint16_t secret_length = r.get<uint16_t>("secret length");
    if (secret_length > kMaxSecretBytes) r.fail("secret is too long");
    const uint8_t* given = r.take(secret_length, "secret");
    if (secret_length == 0 || !same_secret(given, secret_length, secret)) {
      throw Refusal{Status::kBadSecret, "missing or wrong job secret"};
    }
    if (command < static_cast<uint8_t>(Command::kSet) || command > static_cast<uint8_t>(Command::kPing)) {
      r.fail("unknown command " + std::to_string(command));
    }
    Request request;
    request.command = static_cast<Command>(command);
    request.timeout_ms = r.get<uint32_t>("timeout");
    const uint32_t count = r.get<uint32_t>("key count");
    if (count > kMaxWaitKeys) {
      r.fail(std::to_string(count) + " keys exceed the limit of " + std::to_string(kMaxWaitKeys));
    }
    for (uint32_t i = 0; i < count; ++i) request.keys.push_back(r.get_string("key", kMaxKeyBytes));
    request.value = r.get_bytes("value", kMaxValueBytes);
    r.expect_end();
    const bool ping = request.command == Command::kPing;
    const size_t least = ping ? 0 : 1;
    const size_t most = ping ? 0 : request.command == Command::kWait ? kMaxWaitKeys : 1;
    if (count < least || count > most) {
      r.fail("command " + std::to_string(command) + " takes " + std::to_string(least) + ".." +
             std::to_string(most) + " keys, got " + std::to_string(count));
    }
    return request;
  });
}

Reply decode_reply(const std::vector<uint8_t>& payload) {
  ByteReader r(payload, "reply from the rendezvous server");
  Reply reply;
  const uint8_t status = r.get<uint8_t>("status");
  if (status > static_cast<uint8_t>(Status::kBadRequest)) r.fail("unknown status " + std::to_string(status));
  reply.status = static_cast<Status>(status);
  reply.value = r.get_bytes("value", UINT32_MAX);
  r.expect_end();
  return reply;
}

std::vector<uint8_t> encode_reply(const Reply& reply) {
  ByteWriter w;
  w.put<uint8_t>(static_cast<uint8_t>(reply.status));
  w.put_bytes(reply.value.data(), reply.value.size());
  return w.take();
}

std::vector<std::string> decode_keys(const std::vector<uint8_t>& data) {
  ByteReader r(data, "key list from the rendezvous server");
  const uint32_t count = r.get<uint32_t>("key count");
  if (count > kMaxWaitKeys) {
    r.fail(std::to_string(count) + " keys exceed the limit of " + std::to_string(kMaxWaitKeys));
  }
  std::vector<std::string> keys;
  keys.reserve(count);
  for (uint32_t i = 0; i < count; ++i) keys.push_back(r.get_string("key", kMaxKeyBytes));
  r.expect_end();
  return keys;
}

std::vector<uint8_t> encode_keys(const std::vector<std::string>& keys) {
  ByteWriter w;
  w.put<uint32_t>(static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) w.put_string(key);
  return w.take();
}

}  // namespace hora::store_protocol
