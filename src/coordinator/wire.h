// Encoding of the control messages between a process set's members and its
// coordinator. Little-endian, versioned, and bounds-checked: decoding
// truncated or garbage bytes throws hora::Internal naming what was wrong,
// never reads out of bounds.
#pragma once

#include <cstdint>
#include <vector>

#include "coordinator/request.h"

namespace hora {

inline constexpr uint8_t kWireVersion = 1;

// Member -> coordinator: new requests in full, plus the response-cache slots
// of requests that equal a cached one (a bit vector on the wire).
struct MemberMessage {
  std::vector<Request> requests;
  std::vector<uint32_t> cached_slots;
};

// Coordinator -> members: the next responses to execute, in order.
struct CoordinatorMessage {
  std::vector<Response> responses;
};

std::vector<uint8_t> encode(const MemberMessage& message);
std::vector<uint8_t> encode(const CoordinatorMessage& message);
MemberMessage decode_member_message(const std::vector<uint8_t>& bytes);
CoordinatorMessage decode_coordinator_message(const std::vector<uint8_t>& bytes);

}  // namespace hora
