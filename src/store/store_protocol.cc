#include "store/store_protocol.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

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

// What each side's HMAC covers: a label that tells the two directions (and
// hora's other protocols) apart, then both nonces, the proving side's last.
net::Digest mac_of(const std::string& secret, std::string_view label, const net::Nonce& first,
                   const net::Nonce& second) {
  return net::hmac_sha256(net::bytes_of(secret), {net::bytes_of(label), first, second});
}

constexpr std::string_view kClientLabel = "hora store client v2";
constexpr std::string_view kServerLabel = "hora store server v2";

}  // namespace

std::array<uint8_t, kChallengeBytes> encode_challenge(const net::Nonce& server_nonce) {
  std::array<uint8_t, kChallengeBytes> out{};
  out[0] = kVersion;
  std::copy(server_nonce.begin(), server_nonce.end(), out.begin() + 4);
  return out;
}

net::Nonce decode_challenge(std::span<const uint8_t> bytes) {
  ByteReader r(bytes, "challenge from the rendezvous server");
  const uint8_t version = r.get<uint8_t>("version");
  if (version != kVersion) {
    r.fail("protocol version " + std::to_string(version) + ", this client speaks " + std::to_string(kVersion));
  }
  r.take(3, "reserved bytes");
  net::Nonce nonce;
  const uint8_t* given = r.take(nonce.size(), "nonce");
  std::copy(given, given + nonce.size(), nonce.begin());
  r.expect_end();
  return nonce;
}

std::array<uint8_t, kProofBytes> encode_proof(const std::string& secret, const net::Nonce& server_nonce,
                                               const net::Nonce& client_nonce) {
  std::array<uint8_t, kProofBytes> out{};
  const net::Digest mac = mac_of(secret, kClientLabel, server_nonce, client_nonce);
  std::copy(client_nonce.begin(), client_nonce.end(), out.begin());
  std::copy(mac.begin(), mac.end(), out.begin() + client_nonce.size());
  return out;
}

bool check_proof(std::span<const uint8_t> proof, const std::string& secret, const net::Nonce& server_nonce,
                 net::Nonce& client_nonce) {
  if (proof.size() != kProofBytes) return false;
  net::Nonce claimed;
  std::copy(proof.begin(), proof.begin() + claimed.size(), claimed.begin());
  const net::Digest expected = mac_of(secret, kClientLabel, server_nonce, claimed);
  if (!net::same_bytes(proof.subspan(claimed.size()), expected)) return false;
  client_nonce = claimed;
  return true;
}

std::array<uint8_t, kAnswerBytes> encode_answer(Status status, const std::string& secret,
                                                const net::Nonce& server_nonce, const net::Nonce& client_nonce) {
  std::array<uint8_t, kAnswerBytes> out{};
  out[0] = static_cast<uint8_t>(status);
  if (status == Status::kOk) {
    const net::Digest mac = mac_of(secret, kServerLabel, client_nonce, server_nonce);
    std::copy(mac.begin(), mac.end(), out.begin() + 1);
  }
  return out;
}

Status check_answer(std::span<const uint8_t> answer, const std::string& secret, const net::Nonce& server_nonce,
                    const net::Nonce& client_nonce) {
  ByteReader r(answer, "answer from the rendezvous server");
  const uint8_t status = r.get<uint8_t>("status");
  const uint8_t* mac = r.take(32, "proof");
  r.expect_end();
  if (status == static_cast<uint8_t>(Status::kBadSecret)) return Status::kBadSecret;
  if (status != static_cast<uint8_t>(Status::kOk)) r.fail("status " + std::to_string(status) + " in the answer");
  const net::Digest expected = mac_of(secret, kServerLabel, client_nonce, server_nonce);
  if (!net::same_bytes({mac, 32}, expected)) {
    throw Internal("the rendezvous server could not prove that it holds the job secret: it is not this job's server");
  }
  return Status::kOk;
}

std::vector<uint8_t> encode_request(const Request& request) {
  ByteWriter w;
  w.put<uint32_t>(0);  // the payload length, filled in below
  w.put<uint8_t>(kVersion);
  w.put<uint8_t>(static_cast<uint8_t>(request.command));
  w.put<uint32_t>(request.timeout_ms);
  w.put<uint32_t>(static_cast<uint32_t>(request.keys.size()));
  for (const std::string& key : request.keys) w.put_string(key);
  w.put_bytes(request.value.data(), request.value.size());
  w.patch_u32(0, static_cast<uint32_t>(w.size() - 4));
  return w.take();
}

Request decode_request(std::span<const uint8_t> payload) {
  return refusing_malformed([&] {
    ByteReader r(payload, "request");
    const uint8_t version = r.get<uint8_t>("version");
    const uint8_t command = r.get<uint8_t>("command");
    if (version != kVersion) r.fail("unsupported protocol version " + std::to_string(version));
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
