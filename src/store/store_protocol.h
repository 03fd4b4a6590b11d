// The rendezvous store's wire protocol (docs/rendezvous.md), both sides:
// the handshake that proves each side holds the job secret without sending
// it; the client encodes requests into frames and decodes reply payloads and
// key lists; the server decodes request payloads. Decoding is bounds-checked
// and never reads out of bounds: bytes that are not a valid reply throw
// hora::Internal ("malformed ..."), a request the server must refuse throws
// Refusal. No I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "net/hmac.h"

namespace hora::store_protocol {

inline constexpr uint8_t kVersion = 2;
enum class Command : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4, kPing = 5 };
enum class Status : uint8_t { kOk = 0, kNotFound = 1, kTimeout = 2, kBadSecret = 3, kBadRequest = 4 };

inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;
inline constexpr size_t kMaxSecretBytes = 256;
inline constexpr size_t kMaxWaitKeys = 4096;
inline constexpr size_t kMaxFrameBytes = kMaxValueBytes + (size_t{64} << 10);
inline constexpr uint32_t kNoTimeoutMs = 0xFFFFFFFF;

// --- the handshake -----------------------------------------------------------
// On accept the server sends its challenge (version, three zero bytes, a
// fresh nonce); the client answers with its own nonce and an HMAC of both
// nonces under the job secret; the server checks it before it reads or
// allocates anything else, and answers with a status (kOk or kBadSecret)
// and its own HMAC, which proves to the client that the server holds the
// secret too. Only then does the client send requests.
inline constexpr size_t kChallengeBytes = 4 + 16;
inline constexpr size_t kProofBytes = 16 + 32;
inline constexpr size_t kAnswerBytes = 1 + 32;

std::array<uint8_t, kChallengeBytes> encode_challenge(const net::Nonce& server_nonce);
// The server's nonce; throws Internal when the bytes are not a challenge of
// this version.
net::Nonce decode_challenge(std::span<const uint8_t> bytes);

// The client's proof of the secret for this server nonce.
std::array<uint8_t, kProofBytes> encode_proof(const std::string& secret, const net::Nonce& server_nonce,
                                               const net::Nonce& client_nonce);
// Whether `proof` proves the secret for `server_nonce`; when it does, the
// client's nonce is stored in `client_nonce`.
bool check_proof(std::span<const uint8_t> proof, const std::string& secret, const net::Nonce& server_nonce,
                 net::Nonce& client_nonce);

// The server's answer to a proof: kOk with its own proof, or kBadSecret.
std::array<uint8_t, kAnswerBytes> encode_answer(Status status, const std::string& secret,
                                                const net::Nonce& server_nonce, const net::Nonce& client_nonce);
// The status the answer gives (kOk or kBadSecret); throws Internal when the
// answer is malformed or its proof does not match the secret (a server that
// does not hold the job's secret).
Status check_answer(std::span<const uint8_t> answer, const std::string& secret, const net::Nonce& server_nonce,
                    const net::Nonce& client_nonce);

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

// Why the server refuses a request: it answers with `status` (kBadRequest)
// and `message`, then closes the connection.
struct Refusal {
  Status status;
  std::string message;
};

// One request frame: the u32 payload length, then the payload. The caller
// keeps keys and value within the limits above.
std::vector<uint8_t> encode_request(const Request& request);

// Server side: one request payload (the frame's length prefix already
// removed) of an authenticated connection; throws Refusal for a truncated or
// overlong payload, an unknown version or command, or a wrong key count.
Request decode_request(std::span<const uint8_t> payload);

// A reply payload (the frame's length prefix already removed), and its
// encoding.
Reply decode_reply(const std::vector<uint8_t>& payload);
std::vector<uint8_t> encode_reply(const Reply& reply);

// A list of keys: u32 count, then u32 length and bytes per key (a WAIT that
// timed out answers with the keys still missing).
std::vector<std::string> decode_keys(const std::vector<uint8_t>& data);
std::vector<uint8_t> encode_keys(const std::vector<std::string>& keys);

}  // namespace hora::store_protocol
