// The shared-memory segment of one process set: its layout, its header
// codec and the owner of one mapping of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hora::shm {

// Every field that two processes write goes on a line of its own, two cache
// lines wide so that the adjacent-line prefetcher does not couple them.
constexpr uint64_t kLine = 128;
constexpr uint32_t kMaxRanks = 1024;
constexpr uint64_t kMinSlotBytes = 4096;
constexpr uint64_t kMaxSlotBytes = uint64_t{1} << 36;
constexpr uint64_t kMinRingBytes = 4096;
constexpr uint64_t kMaxRingBytes = uint64_t{1} << 24;
constexpr size_t kAbortReasonBytes = 480;
// The fast lane's table rows (response-cache slots it serves) and log
// entries (a ring; a power of two).
constexpr uint64_t kLaneRows = 1024;
constexpr uint64_t kLaneLogEntries = 4096;
constexpr uint64_t kLaneBytes = 3 * kLine + 8 * (kLaneRows + kLaneLogEntries);
// A host's lane (fast_lane.h, between hosts) carries the inputs of small
// allreduces for its first kCarriedRows slots, in segments of at most
// kMaxCarryingRanks members: a line (the input's size) and kCarriedBytes per
// member and slot, and the same for the set's result.
constexpr uint64_t kCarriedRows = 64;
constexpr uint64_t kCarriedBytes = 1024;
constexpr uint32_t kMaxCarryingRanks = 8;
constexpr uint64_t kCarriedStride = kLine + kCarriedBytes;

// Where each part of a segment lives, as byte offsets from its start:
//
//   header | abort record | member areas [ranks] | control rings | fast lane | carried | slots
//
// A member area holds its owner's progress counter (with two words of side
// data), its doorbell (futex word + sleeper count), its pid and its state,
// and its place in the fast lane's log (fast_lane.h).
// The control plane is a star: member m (1..ranks-1) has one ring to the
// coordinator and one from it, each a head line, a tail line and
// ring_bytes of data. The fast lane is a log tail line, a drain-request
// line, kLaneRows table rows, kLaneLogEntries log entries and a line of
// completed rows (a host's lane). The carried inputs follow where the
// segment has at most kMaxCarryingRanks members (none otherwise). Each
// member owns two slots (a double buffer) of slot_bytes for collective
// data, page-aligned.
struct SegmentLayout {
  uint32_t ranks = 0;
  uint64_t slot_bytes = 0;
  uint64_t ring_bytes = 0;
  uint64_t total_bytes = 0;

  uint64_t abort_offset() const { return kLine; }
  uint64_t member_offset(uint32_t rank) const { return 5 * kLine + uint64_t{rank} * kMemberBytes; }
  // The ring that carries member `member`'s messages to the coordinator
  // (`upward`) or the coordinator's to it.
  uint64_t ring_offset(uint32_t member, bool upward) const;
  uint64_t lane_offset() const;
  // Whether the segment has carried inputs, and where member `rank`'s input
  // of slot `slot` (< kCarriedRows) is (`rank` == ranks: the result).
  bool carries() const { return ranks <= kMaxCarryingRanks; }
  uint64_t carried_offset(uint32_t slot, uint32_t rank) const;
  uint64_t slots_offset() const;
  uint64_t slot_offset(uint32_t rank, int buffer) const {
    return slots_offset() + (uint64_t{rank} * 2 + static_cast<uint64_t>(buffer)) * slot_bytes;
  }

  static constexpr uint64_t kMemberBytes = 5 * kLine;
  static constexpr uint64_t kRingHeaderBytes = 2 * kLine;
};

// Field offsets inside a member area, an abort record and a ring.
namespace field {
constexpr uint64_t kProgress = 0;        // u64: phases this member has published
constexpr uint64_t kSide = 8;            // u64[2]: side data, indexed by phase parity
constexpr uint64_t kSeat = 24;           // u32: 1 + the CPU this member last published or waited on (sync.h: Seats)
constexpr uint64_t kBell = kLine;        // u32: futex word peers bump to wake this member
constexpr uint64_t kSleepers = kLine + 4;  // u32: threads of this member asleep on kBell
constexpr uint64_t kPid = 2 * kLine;     // i32: the member's process id
constexpr uint64_t kState = 2 * kLine + 4;  // u32: MemberState
constexpr uint64_t kConsumed = 3 * kLine;     // u64: fast-lane log entries this member has run
constexpr uint64_t kWatch = 3 * kLine + 8;    // u32: who of this member waits for log entries
constexpr uint64_t kLaneBell = 3 * kLine + 16;      // u32: futex word of this member's callers running the log
constexpr uint64_t kLaneSleepers = 3 * kLine + 20;  // u32: those asleep on kLaneBell
constexpr uint64_t kDataBell = 4 * kLine;          // u32: futex word of the thread running this member's collective
constexpr uint64_t kDataSleepers = 4 * kLine + 4;  // u32: those asleep on kDataBell
constexpr uint64_t kBellPathSize = 4 * kLine + 8;  // u32: bytes of kBellPath, once published (host_doorbells.h)
constexpr uint64_t kBellPath = 4 * kLine + 64;     // char[kBellPathBytes]: this member's wake-up socket
constexpr uint64_t kBellPathBytes = kLine - 64;
constexpr uint64_t kLaneTail = 0;             // u64: fast-lane log entries appended, ever
constexpr uint64_t kLaneDrain = kLine;        // u32: 1 when the coordinator must drain diverted rows
constexpr uint64_t kLaneRowsAt = 2 * kLine;   // u64[kLaneRows]
constexpr uint64_t kLaneLogAt = 2 * kLine + 8 * kLaneRows;  // u64[kLaneLogEntries]
constexpr uint64_t kLaneCompletedAt = kLaneLogAt + 8 * kLaneLogEntries;  // u64[kLaneRows / 64]: rows completed
constexpr uint64_t kCarriedSize = 0;     // u32: bytes of the carried input that follows the line
constexpr uint64_t kAbortState = 0;      // u32: AbortState
constexpr uint64_t kAbortBy = 4;         // i32: set rank that gave up
constexpr uint64_t kAbortReason = 8;     // char[kAbortReasonBytes]
constexpr uint64_t kRingHead = 0;        // u64: bytes written, ever
constexpr uint64_t kRingTail = kLine;    // u64: bytes read, ever
}  // namespace field

enum MemberState : uint32_t { kAbsent = 0, kAttached = 1, kDeparted = 2 };
enum AbortState : uint32_t { kRunning = 0, kWriting = 1, kAborted = 2 };

// The layout of a segment for `ranks` members with the given slot and ring
// sizes. Throws InvalidArgument when a size is out of range.
SegmentLayout plan_layout(uint32_t ranks, uint64_t slot_bytes, uint64_t ring_bytes);

// Writes the header that decode_header reads back.
void write_header(void* base, const SegmentLayout& layout);

// Reads and checks a header from the first `size` bytes of a mapping:
// magic, version, and every size against the limits above and against the
// layout they imply (which must fit in `size`). Throws Internal naming the
// first bad field.
SegmentLayout decode_header(const void* base, size_t size);

// Allocates and faults in `bytes` of a mapping from `begin` (page-aligned)
// for writing; throws Internal naming the reason (a full /dev/shm) instead
// of the SIGBUS a plain write would get.
void populate(void* begin, uint64_t bytes);

// "hora-<uid>-<32 hex digits from getrandom>".
std::string random_segment_name();
// Whether `name` has that form (so it names a file directly in /dev/shm).
bool valid_segment_name(const std::string& name);
// Removes the name; a name already gone is not an error. Never throws.
void unlink_segment(const std::string& name) noexcept;

// What set rank 0 publishes in the set's store once it has made the
// segment: "ok <name> <total bytes, decimal>".
struct SegmentRecord {
  std::string name;
  uint64_t total_bytes = 0;
};
std::string format_segment_record(const SegmentRecord& record);
// The record that format_segment_record wrote, and only such a record:
// throws Internal ("shared memory: malformed segment record '...': <what is
// wrong>") for anything else (no "ok ", a refused name, a size that is not
// a decimal number in 1..2^64-1 without leading zeros, trailing bytes).
SegmentRecord parse_segment_record(std::string_view text);

// One mapping of a segment, unmapped on destruction. Move-only.
class Segment {
 public:
  // Makes a new segment: O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, sized and
  // mapped, with its control part (everything before the slots) allocated
  // and faulted in; each member allocates its own slots when it first uses
  // them (ShmBackend, through populate()). /dev/shm must have room for the
  // whole segment now. Writes the header. Throws
  // Internal naming the reason (including too little free space in
  // /dev/shm); nothing is left behind then.
  static Segment create(const std::string& name, const SegmentLayout& layout);
  // Maps an existing segment after checking that it is a regular file of
  // this user, mode 0600, reached without a symlink, of `total_bytes`, with
  // a header for `ranks` members. Throws Internal naming what was refused.
  static Segment open(const std::string& name, uint32_t ranks, uint64_t total_bytes);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  const SegmentLayout& layout() const { return layout_; }
  bool mapped() const { return base_ != nullptr; }
  uint8_t* at(uint64_t offset) const { return base_ + offset; }
  template <typename T>
  T* field_at(uint64_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }

 private:
  Segment(uint8_t* base, SegmentLayout layout) : base_(base), layout_(layout) {}

  uint8_t* base_ = nullptr;
  SegmentLayout layout_;
};

}  // namespace hora::shm
