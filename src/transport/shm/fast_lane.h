// FastLane: agreement on repeated ops through shared memory, without the
// coordinator.
//
// An op whose request sits in the response cache (the same name and fields
// as an earlier step) is known to every member by its cache slot. The
// table holds one row per slot: a bit per member that has submitted the
// op, a completion count, and a diverted flag. A submitter sets its bit; the
// member whose bit completes the row resets it (one compare-and-swap, so
// exactly one does) and appends the slot to the log (a host's lane, below:
// marks it completed for the host's leader). The log is the set's
// one order of execution: the coordinator appends its responses to it too
// (their contents still travel over the control plane), and every member
// runs the log's entries in order. So a cached op costs an atomic or two and
// no round trip, and ops agreed both ways never run in different orders.
//
// The coordinator takes a row back (diverts it) when the table cannot
// decide the op alone: a member sent a request of the same name that
// differs (a mismatch the negotiator must report), or a member joined (its
// bit will never come). A diverted row hands its bits to the coordinator,
// which negotiates the op as if they had arrived as cache slots; a member
// whose bit lands in a diverted row raises the drain request so that the
// coordinator collects it.
//
// Waking: a member publishes in its watch word which of its threads wait
// for log entries (kEngine, kDriver); appenders ring the doorbell of such
// members only, so a member whose caller runs the ops itself is not woken
// for them. At most kMaxMembers members (the row's member bits).
//
// A host's lane (Mode::kHost): the members of one host of a set that spans
// several (control/host_agreement.h). A completed row is not appended: it
// is marked completed for the host's leader (member 0 of the lane), which
// agrees on it with the other hosts' leaders and appends what they agreed,
// in their order, with append_slot() and append_response(). A member's
// input of a small allreduce travels in the segment's carried area
// (segment.h) beside its bit. `wake` wakes a member's engine thread, which
// waits on sockets and not on a doorbell (host_doorbells.h): the leader's
// for a row another member completed or a submission that landed in a
// diverted row (unless the leader's caller sleeps on its doorbell waiting
// for an entry: it is rung instead, and looks itself), any member's for an
// entry appended while it watches.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "transport/shm/segment.h"
#include "transport/shm/sync.h"

namespace hora::shm {

class FastLane {
 public:
  static constexpr int kMaxMembers = 31;
  static constexpr uint32_t kEngine = 1;  // watch bits
  static constexpr uint32_t kDriver = 2;

  // What a log entry asks for: the cached op in `slot`, or the next
  // response of the coordinator (`response`).
  struct Entry {
    bool response = false;
    uint32_t slot = 0;
    bool carried = false;  // a host's lane: the result is in the carried area
  };

  enum class Outcome {
    kWaiting,    // the bit is set; others have not submitted yet
    kAppended,   // this submission completed the row and appended it
    kDiverted,   // the coordinator negotiates this op (drain requested)
    kCompleted,  // a host's lane: this submission completed the row
  };
  enum class Mode { kSet, kHost };

  // `bells` are the members' doorbells (their engine threads sleep on
  // them), by set rank; `seats` where the members' threads run (a waiter
  // that shares its CPU with another member yields it); `spin` is how long
  // a waiter spins before it sleeps; `yield_look`, how long a caller
  // waiting for an entry looks first, yielding the CPU between looks
  // (Doorbell::look_yielding; ShmTuning::yield_look).
  FastLane(const Segment& segment, int rank, int size, const std::vector<Doorbell>& bells, const Seats& seats,
           std::chrono::nanoseconds spin, Mode mode = Mode::kSet, std::function<void(int member)> wake = {},
           std::chrono::nanoseconds yield_look = {});

  // Whether a set of `members` can use a lane.
  static bool supports(int members) { return members >= 2 && members <= kMaxMembers; }

  // Any thread of this member: records its submission of the op in `slot`
  // (< kLaneRows).
  Outcome submit(uint32_t slot);

  // A host's lane. This member's input of the op in `slot` (before its
  // submit(); empty: none), where the segment carries one for that slot.
  static bool carries(const Segment& segment, uint32_t slot);
  void write_input(uint32_t slot, std::span<const uint8_t> data);
  // Member `member`'s input, and the result the leader wrote.
  std::vector<uint8_t> input(uint32_t slot, int member) const;
  void write_result(uint32_t slot, std::span<const uint8_t> data);
  std::vector<uint8_t> result(uint32_t slot) const;
  // Leader: the rows completed since the last call (clears them), and
  // appending an agreed op (`carried`: its result is written).
  std::vector<uint32_t> take_completed();
  void append_slot(uint32_t slot, bool carried);
  // Leader: whether a row completed or a submission landed in a diverted
  // row since it last looked.
  bool leader_attention() const;

  // Executor side. The entry at log position `index`, once appended.
  std::optional<Entry> entry(uint64_t index) const;
  // Publishes that this member has run the entries before `next`.
  void set_consumed(uint64_t next);
  uint64_t consumed() const;
  // Entries appended (or being appended) so far.
  uint64_t appended() const;
  // Sets or clears `who` in this member's watch word.
  void watch(uint32_t who, bool on);
  // A driver (a caller running the log) waits until the entry at `index`
  // is appended or give_up() is true, at most about kLivenessInterval.
  template <typename GiveUp>
  void wait_for_entry(uint64_t index, GiveUp&& give_up) const {
    const auto ready = [&] { return entry(index).has_value() || give_up(); };
    if (yield_look_.count() > 0 && caller_waiting() && lane_bells_[rank_].look_yielding(ready, yield_look_)) return;
    lane_bells_[rank_].wait(ready, [] {}, Clock::now() + kLivenessInterval, spin_,
                            [&] { return seats_->crowded([](int) { return true; }); });
  }
  // A driver that looks for its entry by other means (a host's leader
  // reading the other hosts' records) calls `ready()` as wait_for_entry()
  // looks, counted as a looker on this member's bell, for up to `look`.
  template <typename Ready>
  bool look(Ready&& ready, std::chrono::nanoseconds look) const {
    return lane_bells_[rank_].look_yielding(ready, look);
  }
  // How long a caller waiting for an entry looks, yielding (zero: it does
  // not).
  std::chrono::nanoseconds yield_look() const { return yield_look_; }
  // Wakes this member's drivers (to look at give_up()).
  void wake_drivers() const { lane_bells_[rank_].ring(); }
  // Whether an entry this member has not run is in the log.
  bool entry_waiting() const { return entry(consumed()).has_value(); }
  // What the engine thread waits for besides control messages: an entry
  // while it watches the log, or (coordinator, a host's leader) a drain
  // request or a completed row.
  bool engine_attention() const;

  // Coordinator only. Appends a response entry (after has_room).
  void append_response();
  // Whether `entries` more fit in the log's first half.
  bool has_room(size_t entries) const;
  // Diverts `slot` (or keeps it diverted) and returns the set ranks whose
  // submissions it held, which the caller now negotiates.
  std::vector<int> divert(uint32_t slot);
  // Ends a diversion if the row holds no submission (false: it does, and
  // stays diverted).
  bool try_undivert(uint32_t slot);
  // Whether a member asked for diverted rows to be drained (clears it).
  bool take_drain_request();
  // The members that have submitted the op in `slot` and its completion
  // count (for stall reports); diverted rows report no members.
  struct RowState {
    std::vector<int> submitted;
    uint32_t completions = 0;
  };
  RowState row_state(uint32_t slot) const;

 private:
  std::atomic_ref<uint64_t> row(uint32_t slot) const;
  std::atomic_ref<uint64_t> log_word(uint64_t index) const;
  std::atomic_ref<uint64_t> tail() const;
  std::atomic_ref<uint64_t> completed_word(uint32_t slot) const;
  void alert_leader() const;
  void write_carried(uint32_t slot, uint32_t member, std::span<const uint8_t> data);
  std::vector<uint8_t> read_carried(uint32_t slot, uint32_t member) const;
  uint64_t member_field(int member, uint64_t offset) const;
  uint64_t min_consumed() const;
  void append(uint32_t payload);
  void ring_watchers() const;
  std::vector<int> members_of(uint64_t bits) const;

  const Segment* segment_;
  const int rank_;
  const int size_;
  const std::vector<Doorbell>* bells_;
  const Seats* seats_;
  std::vector<Doorbell> lane_bells_;
  const std::chrono::nanoseconds spin_;
  const std::chrono::nanoseconds yield_look_;
  const uint64_t full_;  // every member's bit
  const Mode mode_;
  const std::function<void(int member)> wake_;
};

}  // namespace hora::shm
