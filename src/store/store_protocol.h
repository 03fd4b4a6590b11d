// The rendezvous store's wire protocol (docs/rendezvous.md), both sides:
// the client encodes requests into frames and decodes reply payloads and key
// lists; the in-process server decodes request payloads. Decoding is
// bounds-checked and never reads out of bounds: bytes that are not a valid
// reply throw hora::Internal ("malformed ..."), a request the server must
// refuse throws Refusal. No I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hora::store_protocol {

inline constexpr uint8_t kVersion = 1;
enum class Command : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4, kPing = 5 };
enum class Status : uint8_t { kOk = 0, kNotFound = 1, kTimeout = 2, kBadSecret = 3, kBadRequest = 4 };

inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;
inline constexpr size_t kMaxSecretBytes = 256;
inline constexpr size_t kMaxWaitKeys = 4096;
inline constexpr size_t kMaxFrameBytes = kMaxValueBytes + (size_t{64} << 10);
inline constexpr uint32_t kNoTimeoutMs = 0xFFFFFFFF;

struct Request {
  Command command = Command::kPing;
  uint32_t timeout_ms = 0;
  std::vector<std::string> keys;
  std::vector<uint8_t> value;
};

struct Reply {
  Status status = Status::kOk;
  std::vector<uint8_t> value;
};

// Why the server refuses a request: it answers with `status` (kBadSecret or
// kBadRequest) and `message`, then closes the connection.
struct Refusal {
  Status status;
  std::string message;
};

// One request frame: the u32 payload length, then the payload. The caller
// keeps keys, value and secret within the limits above.
std::vector<uint8_t> encode_request(const std::string& secret, const Request& request);

// Server side: one request payload (the frame's length prefix already
// removed), checked against the job's `secret` before anything else is
// looked at; throws Refusal for a missing or wrong secret, a truncated or
// overlong payload, an unknown version or command, or a wrong key count.
Request decode_request(const std::vector<uint8_t>& payload, const std::string& secret);

// A reply payload (the frame's length prefix already removed), and its
// encoding.
Reply decode_reply(const std::vector<uint8_t>& payload);
std::vector<uint8_t> encode_reply(const Reply& reply);

// A list of keys: u32 count, then u32 length and bytes per key (a WAIT that
// timed out answers with the keys still missing).
std::vector<std::string> decode_keys(const std::vector<uint8_t>& data);
std::vector<uint8_t> encode_keys(const std::vector<std::string>& keys);

}  // namespace hora::store_protocol
