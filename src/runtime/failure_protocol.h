// The failure protocol of a process set: what its engine does once the set
// breaks (docs/fault_tolerance.md).
//
// The coordinator gives up the data plane first, so that members blocked in
// a collective with it fail now rather than at their timeout. When the
// failure names nobody (a collective failed, a member reported a failure)
// it probes every member it still reaches and waits a census window: a
// member whose control connection closes is dead, one that neither answers
// nor closes is hung; members that reported get the probe too, as a sign
// that a verdict is coming. It then sends its verdict to every member still
// connected. A member that finds the failure itself reports it and waits for
// the verdict: a little longer than a census window, or, when it has already
// waited the op timeout, only a short grace for the coordinator to answer
// (probe or verdict) and the longer wait after that. Without a verdict it
// names the coordinator.
//
// FailureProtocol runs on the set's engine thread once its loop has ended,
// blocks for at most the waits above (less once `stopping` is set), and owns
// nothing: it talks through the set's links.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine_options.h"
#include "runtime/set_links.h"

namespace hora {

// How long a set that a member left cleanly waits for the log entries that
// member had run (FailureMessage::ran) before it closes all the same.
inline constexpr std::chrono::seconds kClosingGrace{2};

// Why the set broke, as this member first saw it.
struct SetFailure {
  std::string reason;
  std::vector<int> gone;      // set ranks known to be dead or hung
  bool needs_census = false;  // who is missing is unknown: ask (coordinator) or report (member)
  bool verdict = false;       // members: `reason` is the coordinator's final verdict
  bool waited_out = false;    // members: this member waited the op timeout itself
  bool coordinator_answered = false;  // members: the coordinator has probed this member
  bool left = false;  // a member said goodbye (or the coordinator said closed): the set is closed, not broken
  uint64_t ran = 0;   // left: the log entries the member that left had run
};

// A clean leave waiting for the log to hold the entries the member that
// left had run (another host's leader may append them later than that
// member's goodbye arrives: control/host_agreement.h).
class PendingClose {
 public:
  using Clock = std::chrono::steady_clock;

  // `left` closes the set once the log is `left.ran` long.
  void start(SetFailure left);
  bool active() const;
  // Another member (set rank) left too, having run `ran` entries.
  void also(int member, uint64_t ran);
  // Sets `failure` to the leave (unless set already) once the log is long
  // enough or kClosingGrace has passed; whether it still waits.
  bool settle(uint64_t log_length, std::optional<SetFailure>& failure);

 private:
  std::optional<SetFailure> left_;
  Clock::time_point since_;
};

class FailureProtocol {
 public:
  FailureProtocol(const EngineOptions& set, SetLinks& links, const std::atomic<bool>& stopping)
      : set_(set), links_(links), stopping_(stopping) {}

  // Coordinator: decides who is missing (`closed`, `reported`: by set rank)
  // and tells every member it reaches. Returns the verdict. `lost_ops`:
  // ops of this rank waited in the set (a set closed by a member that left
  // is broken for this rank then).
  std::string conclude(SetFailure failure, std::vector<bool> closed, std::vector<bool> reported,
                       bool lost_ops = true);
  // Member: the coordinator's verdict, or one naming the coordinator.
  std::string await_verdict(SetFailure failure, bool lost_ops = true);

  // For a set with op timeout `timeout`: how long the coordinator waits for
  // members to answer its probe; how long a member waits for the
  // coordinator's verdict once the coordinator has answered (or when the
  // member found the failure before it had waited the op timeout); and the
  // grace a member that has waited the op timeout gives the coordinator,
  // first to fail the op itself, then to answer the member's report.
  static std::chrono::milliseconds census_window(std::chrono::milliseconds timeout);
  static std::chrono::milliseconds verdict_wait(std::chrono::milliseconds timeout);
  static std::chrono::milliseconds coordinator_grace(std::chrono::milliseconds timeout);

 private:
  using Clock = std::chrono::steady_clock;
  void census(const std::string& reason, std::vector<bool>& gone, std::vector<bool>& closed,
              std::vector<bool>& reported);
  std::optional<std::string> receive_verdict(const SetFailure& failure, std::string& missed);
  bool receive(Clock::time_point deadline, std::optional<ControlMessage>& message);
  bool send_quietly(int to, const std::vector<uint8_t>& bytes);
  std::string outcome(const SetFailure& failure, const std::vector<int>& missing_global, bool lost_ops) const;

  const EngineOptions& set_;
  SetLinks& links_;
  const std::atomic<bool>& stopping_;
};

}  // namespace hora
