// StreamAgreement: agreement on repeated ops for a set whose members share
// no segment (several hosts), without the coordinator's round trip
// (control/agreement.h; design in docs/architecture.md, "Agreement between
// hosts").
//
// The set's order is the coordinator's stream: the messages set rank 0
// sends each member over the control plane, in one order for all of them.
// When the coordinator submits a cached op it appends the op to its log and
// sends a record of it at once ("slot s, instance j"): that record is the
// op's place in every member's log. Every other member sends a record of
// its own submissions to the coordinator, which relays it to the others in
// its stream. A member runs the op at that place once it holds the record
// of every member for the same instance, so the op costs one message from
// its last submitter to each member (through the coordinator for a third
// member), and no member waits for the coordinator's decision.
//
// Instances: each member counts the instances of a cached op it took part
// in (submitted through the agreement or as a request, or stood in for);
// the counts agree on every member, so a record names the instance it is
// for and a stale one is never taken for a later one.
//
// What the coordinator negotiates instead (divert()): an op whose place in
// its stream has not been given yet is negotiated as on the other
// agreements, its records handed over as submissions. A place already
// given can complete on a member before the coordinator knows, so it is
// voided only once it cannot complete: the coordinator asks the members
// whose record it lacks (kVoidQuery); one that will not submit that
// instance through the agreement (it sent a request instead, joined, or
// waits on something else) answers kVoid and voids the place itself;
// the coordinator then voids it for all (kDrain) and negotiates the
// submissions it held. A member that had sent its record answers nothing:
// the place completes.
//
// Threads as Agreement says. Sends happen under the stream lock (a caller's
// submission, the engine thread's relays and responses), so the stream's
// order is the coordinator's log order.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "control/agreement.h"
#include "coordinator/wire.h"

namespace hora::control {

class StreamAgreement final : public Agreement {
 public:
  static constexpr size_t kRows = 1024;

  using Send = std::function<void(int to, const std::vector<uint8_t>& bytes)>;
  // `rank` and `size`: this member's set rank and the set's size (2 or
  // more); `send`: over the set's control plane; `wake_engine`: makes this
  // member's engine thread look at the log; `spin`: how long a driver looks
  // for an entry before it sleeps.
  StreamAgreement(int rank, int size, Send send, std::function<void()> wake_engine, std::chrono::nanoseconds spin);

  // Members beyond which records carry no input (the coordinator relays
  // each to every member).
  static constexpr int kMaxCarryingMembers = 8;

  size_t rows() const override { return kRows; }
  Outcome submit(uint32_t slot) override { return submit_carrying(slot, {}); }
  size_t max_carried_bytes() const override { return size_ <= kMaxCarryingMembers ? kMaxCarriedBytes : 0; }
  Outcome submit_carrying(uint32_t slot, std::vector<uint8_t> data, Reduction how = {}) override;
  // submit_carrying() of the instance this member last counted (took_part()
  // counts it): a host's leader counts its own submission into its host's
  // lane and submits the host's record once the host's row completes
  // (control/host_agreement.h).
  Outcome submit_counted(uint32_t slot, std::vector<uint8_t> data);

  std::optional<Entry> entry(uint64_t index) const override;
  bool has_entry(uint64_t index) const override { return settled_.load() > index; }
  std::chrono::nanoseconds look_spin() const override { return spin_; }
  // The coordinator of more than two members relays each record to the
  // others.
  bool relays() const override { return rank_ == 0 && size_ > 2; }
  void set_consumed(uint64_t next) override;
  bool entry_waiting() const override;
  void watch(uint32_t who, bool on) override;
  void wait_for_entry(uint64_t index, const std::function<bool()>& give_up) const override;
  void wake_drivers() const override;

  void response_received() override;

  bool has_room(size_t) const override { return true; }
  void append_response() override;
  std::vector<int> divert(uint32_t slot) override;
  bool try_undivert(uint32_t slot) override;
  bool take_drain_request() override;
  bool drain_requested() const override;
  RowState row_state(uint32_t slot) const override;

  void received(int from, const std::vector<uint8_t>& bytes) override;
  void took_part(uint32_t slot) override;
  void in_order(const std::function<void()>& publish) override;

 private:
  // A place in this member's log: a response, or the coordinator's
  // submission of instance `instance` of the op in `slot`.
  struct Place {
    bool response = false;
    uint32_t slot = 0;
    uint32_t instance = 0;
    bool void_ = false;
    std::vector<uint8_t> data;  // the coordinator's input, where carried
  };
  struct Record {
    uint32_t instance = 0;
    std::vector<uint8_t> data;
  };
  struct Row {
    uint32_t instances = 0;  // of this member (took part in)
    // By set rank (not the coordinator's): the instances whose records are
    // here and not yet used, oldest first.
    std::vector<std::deque<Record>> records;
    std::deque<uint32_t> recorded;  // this member's own records, the last few
    uint32_t completions = 0;
    // Coordinator: negotiated by the coordinator from now on, the
    // submissions it negotiates (set ranks), and the instance whose place
    // it asked to void.
    bool diverted = false;
    std::vector<int> handed;
    uint32_t querying = 0;
  };

  Row& row(uint32_t slot, const char* what);
  Outcome submit_instance(uint32_t slot, bool counted, std::vector<uint8_t> data);
  Place* open_place(uint32_t slot, uint32_t instance);
  std::optional<Entry> complete(Place& place);
  static void keep(std::deque<Record>& records, Record record, uint32_t floor);
  static bool holds(const std::deque<Record>& records, uint32_t instance);
  void settle();
  void void_place(Place& place);
  void send_all(const AgreementMessage& message, int except);
  void send_to(int to, const AgreementMessage& message);
  void on_coordinator(AgreementMessage message);
  void on_member(int from, AgreementMessage message);

  const int rank_;
  const int size_;
  const Send send_;
  const std::function<void()> wake_engine_;
  const std::chrono::nanoseconds spin_;

  std::recursive_mutex stream_;  // held while sending (before mutex_)
  mutable std::mutex mutex_;
  mutable std::condition_variable appended_;
  // Guarded by mutex_.
  std::vector<Row> rows_;
  std::deque<Place> places_;        // not yet settled, in log order
  std::deque<Entry> entries_;       // settled, from log index base_
  uint64_t base_ = 0;
  uint64_t consumed_ = 0;
  bool drain_request_ = false;
  std::atomic<uint64_t> settled_{0};  // entries in the log so far
  std::atomic<uint32_t> watchers_{0};
  mutable std::atomic<int> sleepers_{0};
};

}  // namespace hora::control
