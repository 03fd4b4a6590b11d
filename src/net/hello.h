// The hello that opens each connection between the members of a process
// set that hora makes itself: the control channel (a member connects to
// the set's coordinator, set rank 0) and the TCP data plane (each member
// connects to every member of a lower set rank). How the connecting member
// proves that it is the member it claims to be. Pure encoders and checks;
// the channel or the data plane does the I/O.
//
// The listening member makes a fresh random key (16 bytes) and publishes it
// with its listening address in the set's store, which only the job's ranks
// can read (the store authenticates them with the job secret):
//
//   address record: [16 bytes key]["host:port"]
//
// On each connection it accepts, the listener sends a challenge with a
// fresh nonce, and the member answers:
//
//   challenge (listener -> member, 20 bytes): [u32 0x48524348][16 bytes nonce]
//   answer    (member -> listener, 40 bytes): [u32 0x48524341][u32 set rank][32 bytes mac]
//   mac = HMAC-SHA-256(key, "hora control hello v1" | u32 len(set) | set | u32 set rank | nonce)
//
// integers little-endian, `set` the connection's purpose and set (the
// control channel: describe_set, "process set [0, 2, 5]"; the data plane
// adds " tcp data"). Frames or data follow the answer on the same
// connection. The listener admits an answer only with the right magic, a
// set rank in the range it expects and the right mac (compared in constant
// time); a replayed answer fails the mac, since each connection gets its
// own nonce.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "net/hmac.h"

namespace hora::net {

using HelloKey = std::array<uint8_t, 16>;

constexpr uint32_t kChallengeMagic = 0x48524348;
constexpr uint32_t kAnswerMagic = 0x48524341;
constexpr size_t kChallengeBytes = 4 + 16;
constexpr size_t kAnswerBytes = 4 + 4 + 32;

// Where a member listens, and its hello key.
struct AddressRecord {
  HelloKey key{};
  std::string address;  // "host:port"
};

// A record for a listener at `address` under a fresh random key.
AddressRecord fresh_address_record(const std::string& address);

std::vector<uint8_t> encode_address_record(const AddressRecord& record);
// Throws DecodeError ("malformed control address record: ...") when
// `bytes` is too short to hold a key and an address.
AddressRecord decode_address_record(std::span<const uint8_t> bytes);

std::array<uint8_t, kChallengeBytes> encode_challenge(const Nonce& nonce);
// The challenge's nonce; throws DecodeError naming the wrong length or
// magic.
Nonce decode_challenge(std::span<const uint8_t> bytes);

std::array<uint8_t, kAnswerBytes> encode_answer(const HelloKey& key, const std::string& set, uint32_t rank,
                                                const Nonce& nonce);

// What the listener makes of an answer: the set rank it proves, or why
// it is refused ("wrong magic", "set rank 7 is out of range for a set of 4
// members", "wrong mac").
struct AnswerCheck {
  int rank = -1;
  std::string refusal;
  bool admitted() const { return refusal.empty(); }
};

// Checks `answer` to the challenge that carried `nonce`, for a set of
// `set_size` members, admitting set ranks from `lowest` to set_size - 1.
// Never throws for any input.
AnswerCheck check_answer(std::span<const uint8_t> answer, const HelloKey& key, const std::string& set,
                         size_t set_size, const Nonce& nonce, uint32_t lowest = 1);

}  // namespace hora::net
