// The data plane of one process set whose members share a host, through
// the set's shared-memory segment (its control plane runs on the same
// segment's rings: control/shm_control_plane.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "transport/backend.h"
#include "transport/shm/attachment.h"
#include "transport/shm/segment.h"
#include "transport/shm/sync.h"

namespace hora::shm {

// One member's data plane over its attachment to the segment (see
// segment.h for its layout).
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
// Threading is as Backend states. While it waits in a collective, the
// thread drains this member's incoming control rings (control_rings.h), so
// that a member blocked here never holds up a peer sending it a message.
//
// Failures: a member that leaves (its attachment is dropped: it marks
// itself departed) or whose process exits (pidfd) fails every collective
// that waits for it with PeerFailure naming it. A timeout or a failure
// gives up the set's data plane for every member (the segment's abort
// record), as abort() does.
class ShmBackend final : public Backend {
 public:
  explicit ShmBackend(std::shared_ptr<Attachment> member);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(global_ranks_.size()); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  // As allreduce, but only `root` takes the result out of the segment.
  void reduce(void* buf, size_t count, DataType dtype, ReduceOp op, int root) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void barrier() override;
  // Its waits are Doorbell::wait, which says when it goes to sleep.
  bool notices_sleep() const override { return true; }
  // How its waits spin (segment_setup.h: tuning_for).
  const ShmTuning& tuning() const { return tuning_; }

  void abort(const std::string& reason) override;

 private:
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
  bool member_gone(int member);
  std::string name_members(const std::vector<int>& set_ranks) const;
  void expect_one_per_member(const char* name, const std::vector<size_t>& sizes) const;

  // Collectives by chunk (shm_collectives.cc).
  // `root`: the member that takes the result, or kEveryMember.
  static constexpr int kEveryMember = -1;
  void reduce_chunks(const char* name, void* buf, size_t count, DataType dtype, ReduceOp op, int root);
  void allreduce_chunk(uint8_t* data, size_t count, DataType dtype, ReduceOp op, int root);
  void reduce_scatter_allgather(uint8_t* data, size_t count, DataType dtype, ReduceOp op, int buffer, size_t at,
                                int root);

  // What the member shares with its control plane, and references into it.
  const std::shared_ptr<Attachment> member_;
  const std::vector<int>& global_ranks_;
  const int rank_;
  const std::string& set_name_;
  const Segment& segment_;
  const std::chrono::milliseconds timeout_;
  const ShmTuning& tuning_;
  const std::vector<Doorbell>& bells_;
  const std::vector<Doorbell>& data_bells_;
  Seats& seats_;
  const PeerWatch& peers_;

  // The thread running a collective only.
  uint64_t phase_ = 0;   // phases this member has published
  uint64_t chunks_ = 0;  // chunks moved through the slots, for double buffering
  uint64_t prepared_ = 0;  // bytes of each own slot allocated so far
  std::string broken_;   // the first data-plane failure
  Clock::time_point next_liveness_check_{};
  std::vector<bool> seen_gone_;

  std::mutex abort_mutex_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // guarded by abort_mutex_
};

// Whether `backend` is a ShmBackend (tests).
bool is_shm_backend(const Backend& backend);

}  // namespace hora::shm
