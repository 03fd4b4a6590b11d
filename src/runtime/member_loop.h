// MemberLoop: a member's (set rank > 0) share of a process set's
// negotiation, as a state machine. The engine thread feeds it this member's
// new requests (it returns the message for the coordinator: cache slots
// where its response cache knows them), the control messages that arrive
// (it returns the coordinator's responses, in order) and the time; it
// records why the set broke (failure()): a closed connection, a verdict or
// probe of the coordinator, or a coordinator that decided nothing for the op
// timeout plus a grace. No sockets, no threads, no clock of its own; it never
// blocks. Owns the member's response cache, which the executor fills as it
// runs the responses (engine thread only).
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "control/agreement.h"
#include "coordinator/response_cache.h"
#include "coordinator/wire.h"
#include "runtime/engine_options.h"
#include "runtime/failure_protocol.h"
#include "telemetry/set_telemetry.h"
#include "control/control_plane.h"

namespace hora {

class MemberLoop {
 public:
  using Clock = std::chrono::steady_clock;

  // `agreement`: the set's, whose log a goodbye of the coordinator's may
  // have to wait for (close_once_run()).
  MemberLoop(const EngineOptions& options, const control::Agreement& agreement, telemetry::SetTelemetry& telemetry);

  // The MemberMessage (encoded) that carries `fresh` to the coordinator.
  std::vector<uint8_t> submit_local(std::vector<Request> fresh);
  // The coordinator's responses that `message` carried (none for other kinds).
  std::vector<Response> on_message(const ControlMessage& message);
  // Gives up on a coordinator that decided nothing for the op timeout plus
  // coordinator_grace() on an op waiting here since `oldest` (or since
  // `last_run`, when this rank last ran an op, if later). Returns when to
  // look again at the latest (time_point::max(): no need).
  Clock::time_point inspect(Clock::time_point now, std::optional<Clock::time_point> oldest, Clock::time_point last_run);
  std::chrono::milliseconds inspection_interval() const;

  std::optional<SetFailure>& failure() { return failure_; }
  // As CoordinatorLoop::close_once_run(), for the coordinator's goodbye or
  // its word that the set closed (kClosingGrace at most).
  bool close_once_run();
  ResponseCache& cache() { return cache_; }

 private:
  void on_failure_message(const FailureMessage& message);

  const EngineOptions& options_;
  const control::Agreement& agreement_;
  telemetry::SetTelemetry& telemetry_;
  ResponseCache cache_;
  std::optional<SetFailure> failure_;
  PendingClose closing_;
};

}  // namespace hora
