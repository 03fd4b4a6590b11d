// HostAgreement: agreement on repeated ops for a set whose members are on
// several hosts, each host's members sharing a segment (control/agreement.h;
// design in docs/architecture.md, "Through the hosts' leaders").
//
// Inside a host the members submit into their host's lane (shm::FastLane,
// Mode::kHost): a bit per member in the op's row, a small allreduce's input
// in the segment's carried area beside it. The row's last submitter marks
// it completed for the host's leader (its lowest set rank). Between hosts
// the leaders run a StreamAgreement in which each host is one member: a
// leader submits its host's record once the host's row completes, carrying
// the host's inputs reduced in set-rank order, and the coordinator's stream
// (set rank 0, the leader of host 0) gives every op its place. A leader
// appends what the leaders agreed, in that order, to its host's log, with
// the hosts' sums reduced in host order (so every member ends with the same
// bits); every member runs its host's log.
//
// Instances: a leader counts its own submissions into the lane as the
// stream agreement's member counts its submissions, so the host's record
// names the leader's instance; the host's other members take part in the
// same instances.
//
// Negotiated after all: the coordinator diverts an op as on the other
// agreements. Records of hosts that already sent theirs are handed over by
// the stream agreement (all of that host's members). Rows on other hosts
// may hold some members' bits: the coordinator tells their leaders
// (kDivertHost), which divert the row and hand over its bits (kHanded, one
// set rank each); a bit that lands in a diverted row later rings the
// leader, which hands it over too. Giving a slot back takes every leader's
// acknowledgement (kUndivertQuery, kUndivertAck), sent after the bits its
// row held, so a late kHanded never meets a slot given back. A place already
// given is voided as in the stream agreement, the host's leader answering
// for its host.
//
// Threads as Agreement says; attend() is the leader's own work (rows its
// host completed, bits that landed in diverted rows), from the engine thread
// when the lane's attention rings it, and from a leader's submission.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "control/agreement.h"
#include "control/stream_agreement.h"
#include "transport/shm/fast_lane.h"

namespace hora::control {

class HostAgreement final : public Agreement {
 public:
  // The set ranks on each host, ascending, host 0 holding set rank 0; at
  // least two hosts.
  using Hosts = std::vector<std::vector<int>>;
  // Sends to a set rank over the set's control plane.
  using Send = std::function<void(int to, const std::vector<uint8_t>& bytes)>;
  // `lane`: this member's view of its host's lane (Mode::kHost, its local
  // ranks in set-rank order); `rank`: this member's set rank;
  // `wake_engine`, `spin` as for StreamAgreement.
  HostAgreement(shm::FastLane& lane, bool lane_carries, Hosts hosts, int rank, Send send,
                std::function<void()> wake_engine, std::chrono::nanoseconds spin);

  size_t rows() const override { return shm::kLaneRows; }
  Outcome submit(uint32_t slot) override { return submit_carrying(slot, {}); }
  size_t max_carried_bytes() const override;
  Outcome submit_carrying(uint32_t slot, std::vector<uint8_t> data, Reduction how = {}) override;

  std::optional<Entry> entry(uint64_t index) const override;
  bool has_entry(uint64_t index) const override { return lane_.entry(index).has_value(); }
  // The leader's caller reads the other hosts' records itself: where the
  // machine's ranks outnumber its cores, for as long as the lane's callers
  // look for their log, counted as a looker on its lane bell (a member
  // that completes the host's row rings that bell, and no thread is woken).
  std::chrono::nanoseconds look_spin() const override {
    return leader_ ? std::max(stream_->look_spin(), lane_.yield_look()) : std::chrono::nanoseconds{};
  }
  bool look(const std::function<bool()>& ready, std::chrono::nanoseconds look) const override;
  bool relays() const override { return stream_ && stream_->relays(); }
  void set_consumed(uint64_t next) override { lane_.set_consumed(next); }
  uint64_t log_length() const override { return lane_.appended(); }
  bool entry_waiting() const override { return lane_.entry_waiting(); }
  void watch(uint32_t who, bool on) override;
  void wait_for_entry(uint64_t index, const std::function<bool()>& give_up) const override;
  void wake_drivers() const override { lane_.wake_drivers(); }

  void response_received() override;

  bool has_room(size_t entries) const override { return lane_.has_room(entries); }
  void append_response() override;
  std::vector<int> divert(uint32_t slot) override;
  bool try_undivert(uint32_t slot) override;
  void divert_anew(uint32_t slot) override;
  bool partly_given_back(uint32_t slot) const override;
  bool take_drain_request() override;
  bool drain_requested() const override;
  RowState row_state(uint32_t slot) const override;

  void received(int from, const std::vector<uint8_t>& bytes) override;
  void took_part(uint32_t slot) override;
  void in_order(const std::function<void()>& publish) override;
  void attend() override { serve_host(); }

  bool leader() const { return leader_; }

 private:
  // The coordinator's view of the other hosts' rows of a diverted slot:
  // diverted, being given back (asked, acks counted), given back.
  struct Remote {
    enum class State { kDiverted, kQuerying, kGivenBack } state = State::kDiverted;
    uint32_t round = 0;
    int acks = 0;
  };
  void divert_remote_rows(uint32_t slot, Remote& remote) const;
  std::vector<int> divert_locked(uint32_t slot);

  int host_of(int rank) const;
  int leader_of(int host) const { return hosts_[static_cast<size_t>(host)].front(); }
  void send_to(int rank, const AgreementMessage& message) const;
  void send_to_leaders(const AgreementMessage& message) const;
  // Hands over the submissions of `local_members` (local ranks) in the
  // diverted row of `slot`: to the coordinator's negotiator, or (another
  // host's leader) to the coordinator.
  void hand_over(uint32_t slot, const std::vector<int>& local_members, uint32_t round) const;
  void serve_host() const;
  std::vector<uint8_t> host_sum(uint32_t slot) const;
  void reduce(uint32_t slot, std::vector<uint8_t>& into, const std::vector<uint8_t>& from) const;
  void pump() const;
  void on_coordinator_message(const AgreementMessage& message, const std::vector<uint8_t>& bytes);
  void on_leader_message(int host, const AgreementMessage& message, const std::vector<uint8_t>& bytes);

  shm::FastLane& lane_;
  const bool lane_carries_;
  const Hosts hosts_;
  const int rank_;
  const int host_;
  const std::vector<int>& locals_;  // set ranks of this host
  const bool leader_;
  const Send send_;
  const std::function<void()> wake_engine_;
  // How each slot's carried op reduces, as the leader submitted it (its
  // submission comes before its host's row can complete).
  std::vector<Reduction> reductions_;
  std::unique_ptr<StreamAgreement> stream_;  // the leaders' agreement; leaders only

  // Held while this host's rows are diverted, given back, or emptied of
  // what landed in them (by the engine thread, or a caller of the leader's
  // that waits for an entry); taken after the stream's lock where both are
  // (divert()), and no stream lock is taken under it otherwise.
  mutable std::mutex attend_;
  mutable std::mutex pump_;    // held while appending to the lane (which may wait for room)
  mutable uint64_t pumped_ = 0;  // stream entries appended to the lane; guarded by pump_
  mutable std::mutex mutex_;
  // Guarded by mutex_.
  std::set<uint32_t> diverted_rows_;        // this host's rows diverted
  mutable std::map<uint32_t, Remote> remote_;  // coordinator: diverted slots
  mutable std::map<uint32_t, std::vector<int>> handed_;  // coordinator: set ranks to negotiate
  mutable bool drain_request_ = false;      // coordinator
};

}  // namespace hora::control
