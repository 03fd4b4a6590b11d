// CoordinatorLoop: set rank 0's share of a process set's negotiation, as a
// state machine. The engine thread feeds it this member's new requests, the
// control messages that arrive and the time; it answers with the bytes to
// send every member and the agreed responses that enter the log, and records
// why the set broke (failure()); ops of diverged members fail alone. No sockets, no threads, no clock of its own;
// it never blocks. It owns the Negotiator, the StallInspector and the
// diversion state of the agreement's slots (control/agreement.h): a slot is
// taken back from the agreement before the coordinator negotiates a request
// that differs from the cached one, and every slot while a member has
// joined; it is given back once no submission of its op is pending anywhere.
// The coordinator alone prints stall warnings and fails stalled ops.
#pragma once

#include <chrono>
#include <deque>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "control/agreement.h"
#include "coordinator/negotiator.h"
#include "coordinator/stall_inspector.h"
#include "coordinator/wire.h"
#include "runtime/engine_options.h"
#include "runtime/failure_protocol.h"
#include "telemetry/set_telemetry.h"
#include "control/control_plane.h"

namespace hora {

class CoordinatorLoop {
 public:
  using Clock = std::chrono::steady_clock;

  // Responses agreed in one dispatch: `bytes` (a CoordinatorMessage) go to
  // every member first, then committed() appends their log entries.
  struct Dispatch {
    std::vector<uint8_t> bytes;  // empty: nothing to send
    std::vector<Response> responses;
  };

  CoordinatorLoop(const EngineOptions& options, control::Agreement& agreement, telemetry::SetTelemetry& telemetry);

  // This member's own new requests, as cache slots where the cache knows them.
  void submit_local(std::vector<Request> fresh, Clock::time_point now);
  // A control message from a member, or the closure of its connection.
  void on_message(const ControlMessage& message, Clock::time_point now);
  // Collects submissions from diverted slots, then the responses that are
  // ready and fit in the log.
  Dispatch dispatch(Clock::time_point now);
  // `sent` went to every member: its entries enter the log, and slots whose
  // ops are decided go back to the agreement.
  void committed(const Dispatch& sent, Clock::time_point now);
  // Stall warnings and failures; `head_start` is added to the ages of the
  // ops it times.
  void inspect(Clock::time_point now, std::chrono::milliseconds head_start = std::chrono::milliseconds{0});
  std::chrono::milliseconds inspection_interval() const { return inspector_.inspection_interval(); }
  // Whether agreed responses wait for room in the log.
  bool holding() const { return !undispatched_.empty(); }

  std::optional<SetFailure>& failure() { return failure_; }
  // A member said goodbye after running entries this log does not hold yet
  // (FailureMessage::ran): the set closes once it holds them, or after
  // kClosingGrace. Looks whether it does; whether a goodbye still waits.
  bool close_once_run();
  const ResponseCache& cache() const { return negotiator_.cache(); }
  const Negotiator& negotiator() const { return negotiator_; }
  const std::vector<bool>& closed() const { return closed_; }
  const std::vector<bool>& reported() const { return reported_; }

 private:
  void on_member_message(int from, const std::vector<uint8_t>& bytes, Clock::time_point now);
  void on_failure_message(int from, const FailureMessage& message, Clock::time_point now);
  void note_agreed(const std::vector<Response>& ready, Clock::time_point now);
  void divert(uint32_t slot, Clock::time_point now);
  void take_back(uint32_t slot, Clock::time_point now);
  void divert_all(Clock::time_point now);
  void divert_for(const Request& request, Clock::time_point now);
  void release(uint32_t slot, Clock::time_point now);
  void update_diversions(const std::vector<Response>& dispatched, Clock::time_point now);
  size_t agreed_rows() const;
  void inspect_agreement(Clock::time_point now);
  void abandon(const std::string& reason, Clock::time_point now);
  std::vector<PendingOp> agreement_pending() const;

  const EngineOptions& options_;
  control::Agreement& agreement_;
  telemetry::SetTelemetry& telemetry_;
  Negotiator negotiator_;
  StallInspector inspector_;
  std::optional<SetFailure> failure_;
  PendingClose closing_;  // a goodbye waiting for the log (close_once_run)
  std::set<int> said_goodbye_;  // members that left cleanly (their closures are expected)
  std::vector<bool> closed_;    // members whose control connection closed
  std::vector<bool> reported_;  // members that reported a failure
  std::deque<Response> undispatched_;  // agreed, waiting for room in the log
  // Diverted slots (all_diverted_: every slot, while a member has joined)
  // and the ops some members submitted through the agreement and others not
  // yet (their stall clocks).
  std::set<uint32_t> diverted_;
  bool all_diverted_ = false;
  struct AgreementWait {
    uint32_t completions = 0;
    std::vector<int> submitted;
    Clock::time_point since;  // the first inspection that saw it waiting
  };
  std::unordered_map<uint32_t, AgreementWait> waits_;
};

}  // namespace hora
