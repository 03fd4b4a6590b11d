// The rendezvous store's wire protocol (docs/rendezvous.md) as the C++ client
// speaks it: requests encoded into frames, reply payloads and key lists
// decoded. Decoding is bounds-checked: bytes that are not a valid reply
// throw hora::Internal ("malformed ..."), never read out of bounds. No I/O.
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

// One request frame: the u32 payload length, then the payload. The caller
// keeps keys, value and secret within the limits above.
std::vector<uint8_t> encode_request(const std::string& secret, const Request& request);

// A reply payload (the frame's length prefix already removed), and its
// encoding.
Reply decode_reply(const std::vector<uint8_t>& payload);
std::vector<uint8_t> encode_reply(const Reply& reply);

// A list of keys: u32 count, then u32 length and bytes per key (a WAIT that
// timed out answers with the keys still missing).
std::vector<std::string> decode_keys(const std::vector<uint8_t>& data);
std::vector<uint8_t> encode_keys(const std::vector<std::string>& keys);

}  // namespace hora::store_protocol
