// The communicator of one process set whose members share a host: data and
// control plane through one shared-memory segment.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "net/frames.h"
#include "transport/backend.h"
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
};

// One member's view of the segment (see segment.h for its layout). Every
// member has attached when this is made; the segment's name is gone.
//
// Collectives move data through the members' slots in chunks of at most a
// slot. A chunk is one or two phases: a member copies its part into its own
// slot (buffer k % 2 for its k-th chunk), publishes the phase by raising
// its progress counter (release), waits until every member's counter has
// reached it (acquire) and then reads what it needs from the others'
// slots. Since a member publishes chunk k+1 only after it finished reading
// chunk k, seeing every member at chunk k+1 proves that buffer k % 2 is
// free again: double buffering needs no third sync. Every member runs the
// same collectives in the same order, so phases line up.
//
// Control plane: a byte stream of [u32 length][bytes] frames per direction
// between the coordinator and each member (a ring with head and tail
// counters). Threading is as Backend states; a sender that finds a ring
// full waits for space, and the engine thread drains its incoming rings
// into memory while it waits (for space or in a collective), so two
// members that send to each other never deadlock.
//
// Failures: a member that leaves (its backend is destroyed: it marks
// itself departed) or whose process exits (pidfd) fails every collective
// that waits for it with PeerFailure naming it, and its control link is
// reported closed. A timeout or a failure gives up the set's data plane
// for every member (the segment's abort record), as abort() does.
class ShmBackend final : public Backend {
 public:
  ShmBackend(std::vector<int> global_ranks, int rank, Segment segment, std::chrono::milliseconds timeout,
             ShmTuning tuning);
  ~ShmBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(global_ranks_.size()); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void barrier() override;

  void send_control(int to, const std::vector<uint8_t>& bytes) override;
  std::optional<ControlMessage> receive_control(std::chrono::steady_clock::time_point deadline) override;
  void wake() override;
  void abort(const std::string& reason) override;
  FastLane* fast_lane() override { return lane_ ? &*lane_ : nullptr; }

 private:
  // One control link, as its reader (the engine thread) sees it.
  struct Inbox {
    int peer = -1;
    net::FrameReader frames;  // bytes read but not yet returned
    bool closed = false;
    bool closure_reported = false;
  };

  // Data plane (shm_backend.cc).
  template <typename Collective>
  void run(const char* name, size_t slot_use, Collective&& collective);
  // Allocates this member's two slots up to `bytes` (rounded up to
  // kSlotGrowth, at most a slot); Internal when /dev/shm has no room.
  void prepare_own_slots(size_t bytes);
  static constexpr size_t kSlotGrowth = 16 * 1024;
  uint8_t* slot(int member, int buffer) const;
  uint64_t progress_of(int member) const;
  // Publishes the next phase (with `side` data) and waits for every member
  // to reach it; returns the phase.
  uint64_t sync(uint64_t side = 0);
  uint64_t side_of(int member, uint64_t phase) const;
  void wait_for_all(uint64_t phase);
  // Throws when the set was aborted or a member it waits for is gone.
  void check_data_plane(uint64_t phase);
  void give_up(const std::string& reason) noexcept;
  std::string abort_record() const;
  bool member_departed(int member) const;
  bool member_gone(int member);
  std::string name_members(const std::vector<int>& set_ranks) const;
  void expect_one_per_member(const char* name, const std::vector<size_t>& sizes) const;
  Clock::time_point deadline() const;

  // Collectives by chunk (shm_collectives.cc).
  void allreduce_chunk(uint8_t* data, size_t count, DataType dtype, ReduceOp op);
  void reduce_scatter_allgather(uint8_t* data, size_t count, DataType dtype, ReduceOp op, int buffer, size_t at);
  // Allreduce chunks of kTurnsFrom bytes or more take turns at the
  // positions of a slot that fit them (shm_collectives.cc says why).
  static constexpr size_t kTurnsFrom = 32 * 1024;
  static constexpr size_t kTurnAlign = 4096;
  // Where in its slot the chunk-th chunk, of `bytes`, goes; and how much
  // of its slots an allreduce whose chunks are `bytes` long uses.
  size_t turn_position(size_t bytes, uint64_t chunk) const;
  size_t turns_extent(size_t bytes) const;
  // The room a chunk of `bytes` takes at one position: whole kTurnAlign pages.
  static size_t turn_span(size_t bytes);

  // Control plane (shm_control.cc).
  uint8_t* ring(int member, bool upward) const;
  // Moves what the incoming rings hold into the inboxes; notices closed links.
  void drain_inboxes(bool check_liveness);
  void drain(Inbox& inbox, bool upward_ring);
  std::optional<ControlMessage> pop_frame();
  bool control_pending() const;
  void write_to_ring(int to, const uint8_t* bytes, size_t size, Clock::time_point deadline);
  // Drains the inboxes if no other thread is reading them.
  void drain_if_reader();

  const std::vector<int> global_ranks_;
  const int rank_;
  const std::string set_name_;
  Segment segment_;
  const std::chrono::milliseconds timeout_;
  const ShmTuning tuning_;
  // By set rank: the engine thread's doorbell (control messages, the fast
  // lane's log) and the one of whichever thread runs a collective, apart,
  // so that a collective's syncs never wake an idle engine thread.
  std::vector<Doorbell> bells_;
  std::vector<Doorbell> data_bells_;
  Seats seats_;
  PeerWatch peers_;
  std::optional<FastLane> lane_;  // after bells_ and seats_, which it reads

  // Engine thread only.
  uint64_t phase_ = 0;   // phases this member has published
  uint64_t chunks_ = 0;  // chunks moved through the slots, for double buffering
  uint64_t prepared_ = 0;  // bytes of each own slot allocated so far
  std::string broken_;   // the first data-plane failure
  Clock::time_point next_liveness_check_{};
  std::vector<bool> seen_gone_;

  std::mutex abort_mutex_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // guarded by abort_mutex_

  std::mutex inbox_mutex_;       // held by the thread reading the incoming rings
  std::vector<Inbox> inboxes_;   // by set rank; peer -1 where no link
  std::vector<uint8_t> ring_bytes_;  // drain()'s scratch; guarded by inbox_mutex_
  size_t next_inbox_ = 0;
  Clock::time_point next_control_liveness_check_{};  // guarded by inbox_mutex_
  std::vector<std::unique_ptr<std::mutex>> send_mutexes_;  // by set rank
  std::atomic<bool> wake_pending_{false};
};

// Whether `backend` is a ShmBackend (tests).
bool is_shm_backend(const Backend& backend);

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
