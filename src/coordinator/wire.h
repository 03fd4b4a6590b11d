// Encoding of the control messages between a process set's members and its
// coordinator. Little-endian, versioned, and bounds-checked: decoding
// truncated or garbage bytes throws hora::Internal naming what was wrong,
// never reads out of bounds.
//
// Every message starts with the same header: magic "HR" (u16), version (u8),
// kind (u8). Version 2 added the failure messages (kind 3); version 3 the
// requests a response carries for joined members, and the join op; version
// 4 the goodbye and closed stages of the failure messages; version 5 the
// agreement messages (kind 4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/request.h"

namespace hora {

inline constexpr uint8_t kWireVersion = 6;

// The longest string a message carries (request names, error texts).
inline constexpr uint32_t kMaxWireString = 64 * 1024;

enum class ControlKind : uint8_t { kMember = 1, kCoordinator = 2, kFailure = 3, kAgreement = 4 };

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

// Either direction, once a process set breaks (see progress_engine.h). The
// coordinator asks the members it still reaches whether they are alive
// (kProbe) and then tells them the verdict (kVerdict: `missing` are the
// global ranks found dead or hung, `reason` the full error message every
// member raises). A member reports a failure it found itself, or answers a
// probe, with kReport (`missing`: the global ranks it suspects, if any).
// A member that leaves the set cleanly (it shuts hora down or removes the
// set) says kGoodbye before its connection closes, to the coordinator, or
// from the coordinator to every member; the coordinator then tells the
// members left kClosed instead of a verdict: the set is closed, not broken.
// Both carry `ran`, the log entries the sender had run: a receiver whose log
// does not hold as many yet (its host's leader appends them: control/
// host_agreement.h) closes the set once it does, so that no op the sender
// ran fails here.
struct FailureMessage {
  enum class Stage : uint8_t { kProbe = 1, kReport = 2, kVerdict = 3, kGoodbye = 4, kClosed = 5 };
  Stage stage = Stage::kVerdict;
  std::vector<int32_t> missing;
  std::string reason;  // cut to 64 KiB when encoded
  uint64_t ran = 0;
};

// Either direction: the agreement on cached ops of a set without a shared
// segment (control/stream_agreement.h). `instance` counts the op's
// instances (1 is the first after it was cached), the same on every member.
// kRecord: a member submitted the op in `slot` (from a member: itself; from
// the coordinator: `member`, 0 being the coordinator's own submission,
// which is also the op's place in the set's order). kDrain (coordinator):
// that place is void, the coordinator negotiates the op. kVoidQuery
// (coordinator): will this member submit that instance through the
// agreement? kVoid (member): it will not. Between the leaders of hosts
// (control/host_agreement.h), `instance` numbering the coordinator's rounds:
// kDivertHost (coordinator): divert the host's row of `slot`; kHanded
// (leader): set rank `member` submitted it into the diverted row, the
// coordinator negotiates it; kUndivertQuery (coordinator): give the row
// back; kUndivertAck (leader): given back, every submission in it handed
// before this. A record may carry the
// submitter's input (`data`, at most kMaxCarriedBytes): a small allreduce
// then needs no exchange of its own. (Small, so that a burst of
// asynchronous ops stays far below what a peer's socket buffers take while
// its engine thread runs a long collective and reads nothing.)
inline constexpr uint32_t kMaxCarriedBytes = 1024;
struct AgreementMessage {
  enum class Kind : uint8_t {
    kRecord = 1,
    kDrain = 2,
    kVoidQuery = 3,
    kVoid = 4,
    kDivertHost = 5,
    kHanded = 6,
    kUndivertQuery = 7,
    kUndivertAck = 8,
  };
  Kind kind = Kind::kRecord;
  uint32_t slot = 0;
  uint32_t instance = 0;
  int32_t member = 0;
  std::vector<uint8_t> data;
};

// The kind of an encoded message; throws Internal unless the header is valid.
ControlKind control_kind(const std::vector<uint8_t>& bytes);

std::vector<uint8_t> encode(const MemberMessage& message);
std::vector<uint8_t> encode(const CoordinatorMessage& message);
std::vector<uint8_t> encode(const FailureMessage& message);
std::vector<uint8_t> encode(const AgreementMessage& message);
MemberMessage decode_member_message(const std::vector<uint8_t>& bytes);
CoordinatorMessage decode_coordinator_message(const std::vector<uint8_t>& bytes);
FailureMessage decode_failure_message(const std::vector<uint8_t>& bytes);
AgreementMessage decode_agreement_message(const std::vector<uint8_t>& bytes);

}  // namespace hora
