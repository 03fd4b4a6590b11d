// How the members of a process set on one host come to share its segment:
// set rank 0 makes it, the others map it, and every member marks itself
// attached; a member that cannot use it says why, and the set then takes
// the network path. planner/ decides which sets try.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hora/store.h"
#include "transport/shm/attachment.h"
#include "transport/shm/segment.h"

namespace hora::shm {

// Unlinks a segment's name when it goes out of scope.
struct NameGuard {
  std::string name;
  ~NameGuard();
};

// What prepare() did for a set: on set rank 0, tried to make the segment
// (`made`); on another member whose set store held the segment's record
// (it came with the set's id), mapped it and marked itself attached
// (`opened`). The name is unlinked with the guard unless attach() takes
// it. Dropped with the segment still in it (the set's connection was
// cancelled or failed before attach() took it), it marks this member
// departed and rings the others, so that a member which saw it attach
// fails its first op at once instead of at the op timeout.
struct HeadStart {
  bool made = false;
  bool ok = false;  // made, and the segment is usable
  bool opened = false;
  int rank = 0;  // this member's set rank
  Segment segment;
  NameGuard guard;

  ~HeadStart();
};

// Makes and maps the segments of one process's sets. `slot_bytes` (0: 1
// MiB) per member and buffer; `fallback` names the path a set takes
// without one, in warnings. Any thread.
class SegmentSetup {
 public:
  SegmentSetup(size_t slot_bytes, std::string fallback);

  // Work ahead, for a set known to live on this host (see HeadStart).
  std::shared_ptr<HeadStart> prepare(const std::vector<int>& global_ranks, int rank, Store& store) const;
  // Sleeps on this member's doorbell until every member has attached the
  // segment `head` holds, or `within` passes (false; at once without one).
  bool await_arrival(const HeadStart* head, std::chrono::milliseconds within) const;
  // Set rank 0 makes the segment (or takes the one `head` made); the
  // others map it and publish whether they could. Nullopt: the network
  // path, announced by one warning from set rank 0. Timeout when a member
  // neither attaches nor refuses within `timeout`; InvalidArgument once
  // `cancelled`.
  std::optional<Segment> attach(const std::vector<int>& global_ranks, int rank, Store& store,
                                std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled,
                                HeadStart* head) const;

 private:
  bool make_segment(uint32_t ranks, Store& store, NameGuard& guard, Segment& segment,
                    const std::string& set_name) const;
  std::optional<std::string> refusal_of(const Segment& segment, int member, Store& store,
                                        std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled,
                                        const std::vector<int>& global_ranks) const;

  const size_t slot_bytes_;
  const std::string fallback_;
};

// What makes two processes able to share a segment and watch each other's
// pids: the same kernel boot, host name, /dev/shm file system and pid
// namespace. `claimed` (tests) is appended.
std::string this_host_identity(const std::string& claimed);
// The machine a host identity is on (its boot): hosts that are containers
// or network namespaces of one machine share it, and its cores.
std::string machine_of(const std::string& identity);

// The tuning of a set of `members` on a machine where `machine_ranks` ranks
// of the job run (0: unknown; every host of the job on this machine counts,
// since they share its cores): waits spin less when they outnumber the
// cores.
ShmTuning tuning_for(size_t members, int machine_ranks);

}  // namespace hora::shm
