// Agreement: how the members of one process set agree on the order in which
// they run their ops.
//
// Every member runs the same log of entries, in order: a cached op, named by
// its response-cache slot and agreed without the coordinator where the
// implementation can, or the coordinator's next response (whose contents
// travel over the control plane). The coordinator may take a cached op back
// (divert its slot) when it must negotiate it after all: a member sent a
// request of the same name that differs, or a member joined.
//
// Implementations: NegotiatedAgreement (every op through the coordinator;
// the log holds only responses, in the order they arrive), LaneAgreement
// (members on one host: cached ops agreed in shared memory,
// transport/shm/fast_lane.h), StreamAgreement (members on several hosts:
// cached ops agreed by messages, without the coordinator's round trip;
// control/stream_agreement.h) and HostAgreement (several hosts, each with
// a segment: agreed in each host's lane, then by the hosts' leaders;
// control/host_agreement.h).
//
// Threads: submit() from caller threads; the log side (entry ... wake_drivers)
// from whichever thread holds the executor role; response_received(),
// received(), took_part() and the coordinator side from the set's engine
// thread (took_part() also from the executor). Nothing blocks except
// wait_for_entry() and the sends of an agreement that sends messages.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "hora/types.h"

namespace hora::control {

// How a carried allreduce reduces (the same on every member: it is the
// cached request's, an average as a sum).
struct Reduction {
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

class Agreement {
 public:
  // Which threads of this member wait for log entries (watch()).
  static constexpr uint32_t kEngine = 1;
  static constexpr uint32_t kDriver = 2;

  // Every member's input of a small allreduce, by set rank, where the
  // agreement carried them (submit_carrying()); a host agreement carries
  // their reduction alone.
  using Carried = std::vector<std::vector<uint8_t>>;
  using Reduction = control::Reduction;
  struct Entry {
    bool response = false;  // the coordinator's next response
    uint32_t slot = 0;      // else: the cached op in this slot
    std::shared_ptr<const Carried> carried;  // null: the data plane reduces
  };
  enum class Outcome {
    kWaiting,   // recorded; other members have not submitted yet
    kAppended,  // this submission completed the op and appended it to the log
    kDiverted,  // the coordinator negotiates this op (it has been told)
  };
  // Who has submitted the op in a slot, and how often it completed (stall
  // reports); a diverted slot reports nobody. `unseen`: members may have
  // submitted where the coordinator cannot see them (another host's row),
  // so that `submitted` may lack some; diverting the slot brings them in.
  struct RowState {
    std::vector<int> submitted;
    uint32_t completions = 0;
    bool unseen = false;
  };

  virtual ~Agreement() = default;

  // How many response-cache slots (0, 1, ...) it agrees on without the
  // coordinator; 0: none, every op is negotiated.
  virtual size_t rows() const = 0;
  // Caller threads: this member submits the cached op in `slot` (< rows()).
  virtual Outcome submit(uint32_t slot) = 0;
  // The most input an agreement carries with a submission (0: none).
  virtual size_t max_carried_bytes() const { return 0; }
  // submit() with this member's input of an allreduce (at most
  // max_carried_bytes(), the same size on every member) and how the op
  // reduces: the entry carries every member's, unless a member's record
  // came without.
  virtual Outcome submit_carrying(uint32_t slot, std::vector<uint8_t> data, Reduction how = {}) {
    (void)data;
    (void)how;
    return submit(slot);
  }

  // Executor: the entry at log position `index`, once appended.
  virtual std::optional<Entry> entry(uint64_t index) const = 0;
  // Whether it is appended (cheaper than entry()).
  virtual bool has_entry(uint64_t index) const { return entry(index).has_value(); }
  // How long a driver that waits for an entry looks for the control
  // message that brings it on its own thread (ProgressEngine::look); zero
  // where entries are not brought by control messages. A driver does not
  // look where it may spin only briefly (kUnwatchedSpin: more ranks than
  // cores), since taking the set from the pool and giving it back costs
  // more than such a look finds.
  virtual std::chrono::nanoseconds look_spin() const { return {}; }
  // How such a driver looks: calls `ready()` until it is true (returns
  // true) or `look` has passed (false). Here it yields its CPU every 16
  // looks (the peer that sends the message may share it); an agreement
  // whose members wait otherwise looks its own way.
  virtual bool look(const std::function<bool()>& ready, std::chrono::nanoseconds look) const;
  // Whether this member passes other members' records on (a coordinator
  // that relays): then its engine thread must read them while its caller
  // computes, and a driver does not keep the set lent after its look.
  virtual bool relays() const { return false; }
  // This member has run the entries before `next`.
  virtual void set_consumed(uint64_t next) = 0;
  // How many entries have been appended to this member's log, where another
  // member may run entries before this one holds them (a host agreement:
  // another host's members, once their leader settled an entry); elsewhere
  // the most there is, as whatever another member ran is here already.
  virtual uint64_t log_length() const { return UINT64_MAX; }
  // Whether an entry this member has not run is in the log.
  virtual bool entry_waiting() const = 0;
  // Sets or clears `who` (kEngine, kDriver) among this member's threads
  // that want to be woken for new entries.
  virtual void watch(uint32_t who, bool on) = 0;
  // A driver waits until the entry at `index` is appended or give_up() is
  // true, at most about a tenth of a second.
  virtual void wait_for_entry(uint64_t index, const std::function<bool()>& give_up) const = 0;
  // Wakes this member's drivers (to look at their give_up()).
  virtual void wake_drivers() const = 0;

  // Member's engine thread: a response of the coordinator arrived.
  virtual void response_received() = 0;

  // Coordinator's engine thread. Whether `entries` more responses fit in
  // the log now; appends one response entry (after the members were sent
  // its contents).
  virtual bool has_room(size_t entries) const = 0;
  virtual void append_response() = 0;
  // Takes `slot` back (or keeps it) and returns the set ranks whose
  // submissions it held: the coordinator negotiates them now.
  virtual std::vector<int> divert(uint32_t slot) = 0;
  // Gives `slot` back unless a submission landed in it meanwhile (false).
  virtual bool try_undivert(uint32_t slot) = 0;
  // Before divert(): the coordinator takes `slot` back for a new reason (a
  // mismatching request, a join, diverged members), not only to collect
  // what landed in it since (an agreement whose slots are given back in
  // steps takes them back again now).
  virtual void divert_anew(uint32_t slot) { (void)slot; }
  // The coordinator, of a diverted `slot`: whether it is being given back
  // in steps and has been given back somewhere already (another host's
  // row), so that members may have submitted it there, out of its sight,
  // while it negotiates the op; divert_anew() and divert() bring them in.
  virtual bool partly_given_back(uint32_t slot) const {
    (void)slot;
    return false;
  }
  // Whether a member submitted into a diverted slot since the last call.
  virtual bool take_drain_request() = 0;
  // The same without clearing it (any thread that may call received()):
  // a message just received asks the coordinator's loop to run.
  virtual bool drain_requested() const { return false; }
  virtual RowState row_state(uint32_t slot) const = 0;

  // For an agreement that speaks over the control plane (the defaults serve
  // the others).
  // Engine thread: an agreement message (coordinator/wire.h) from set rank
  // `from`; Internal for one this agreement does not expect.
  virtual void received(int from, const std::vector<uint8_t>& bytes);
  // This member took part in an instance of the cached op in `slot` other
  // than through submit(): it sent the op as a request, or stood in for it.
  virtual void took_part(uint32_t slot) { (void)slot; }
  // Coordinator's engine thread: runs `publish` (which sends responses and
  // appends their entries) so that nothing this agreement sends comes
  // between.
  virtual void in_order(const std::function<void()>& publish) { publish(); }
  // Engine thread, when the agreement's own wake-up rang it: what this
  // member does on its own (a host's leader: the rows its host completed,
  // submissions that landed in diverted rows; control/host_agreement.h).
  virtual void attend() {}
};

}  // namespace hora::control
