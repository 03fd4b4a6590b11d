// One member's attachment to its process set's shared-memory segment: what
// the set's data plane (ShmBackend) and its control plane (the rings, read
// through control/shm_control_plane.h) share.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/shm/control_rings.h"
#include "transport/shm/fast_lane.h"
#include "transport/shm/segment.h"
#include "transport/shm/sync.h"

namespace hora::shm {

// Tuning of one set's shared-memory path.
struct ShmTuning {
  // Allreduce chunks of at most this many bytes take the one-sync path;
  // larger ones reduce-scatter then allgather through the slots.
  size_t small_bytes = 64 * 1024;
  // How long a thread running a collective, or waiting for its op's turn
  // in the fast lane, spins before it sleeps on its doorbell. Longer than
  // a futex wake-up across CPUs (about 20 us on a virtual machine,
  // benchmarks/wakeup.cc): with a shorter spin, two members that both
  // overslept it wake each other on every op from then on. A waiter whose
  // CPU a member it waits for needs yields it instead (sync.h: Seats).
  std::chrono::nanoseconds spin{200'000};
  // How long the engine thread spins for control messages before it
  // sleeps: it idles there between ops.
  std::chrono::nanoseconds spin_engine{20'000};
  // Where the machine's ranks outnumber its cores: how long a caller
  // waiting for an entry of its host's log (a set across hosts agreeing
  // through the hosts' leaders) looks, yielding the CPU between looks,
  // before it sleeps. The entry comes from a peer on this machine (the
  // host's leader, or the member whose submission completes the row) that
  // needs one of the cores: yielding gives it the core at once, where a
  // spin would hold it and a sleep would cost a wake-up on the peer's
  // side. Zero: no such look.
  std::chrono::nanoseconds yield_look{0};
};

// Made once every member has attached (the segment's name is gone); held
// by shared_ptr by the member's ShmBackend and its control plane, and
// destroyed with the last of them, which marks the member departed: its
// peers' collectives that wait for it fail, and its control links are
// reported closed. The doorbells, seats and peer watch are read by any
// thread; the fast lane is as fast_lane.h states; the rings as
// control_rings.h states.
class Attachment {
 public:
  Attachment(std::vector<int> global_ranks, int rank, Segment segment, std::chrono::milliseconds timeout,
             ShmTuning tuning);
  ~Attachment();
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;

  int size() const { return static_cast<int>(global_ranks.size()); }
  // Whether `member` marked itself departed (its backend and control
  // plane are gone).
  bool member_departed(int member) const;
  // Now plus the set's timeout (never, for a timeout of 0).
  Clock::time_point deadline() const;

  const std::vector<int> global_ranks;
  const int rank;
  const std::string set_name;
  const Segment segment;
  const std::chrono::milliseconds timeout;
  const ShmTuning tuning;
  // By set rank: the engine thread's doorbell (control messages, the fast
  // lane's log) and the one of whichever thread runs a collective, apart,
  // so that a collective's syncs never wake an idle engine thread.
  std::vector<Doorbell> bells;
  std::vector<Doorbell> data_bells;
  Seats seats;
  PeerWatch peers;
  std::optional<FastLane> lane;  // after bells and seats, which it reads
  ControlRings rings;
};

// Member `member`'s doorbells in `segment`: the one its engine thread
// sleeps on, and the one of whichever thread runs its collective.
Doorbell member_bell(const Segment& segment, int member);
Doorbell member_data_bell(const Segment& segment, int member);
// The members' seats, as member `rank` sees them.
Seats member_seats(const Segment& segment, int rank);

// Marks `member` departed in `segment` and rings every other member's
// doorbells: a member leaving its set, or giving it up before it was made.
void mark_departed(const Segment& segment, int member);

}  // namespace hora::shm
