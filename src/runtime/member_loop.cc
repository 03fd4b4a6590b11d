#include "runtime/member_loop.h"

#include <algorithm>

#include "hora/errors.h"

namespace hora {

using std::chrono::milliseconds;

MemberLoop::MemberLoop(const EngineOptions& options, const control::Agreement& agreement,
                       telemetry::SetTelemetry& telemetry)
    : options_(options), agreement_(agreement), telemetry_(telemetry), cache_(options.cache_capacity) {}

milliseconds MemberLoop::inspection_interval() const {
  if (options_.timeout.count() <= 0) return milliseconds{0};
  return std::clamp(options_.timeout / 4, milliseconds{10}, milliseconds{1000});
}

std::vector<uint8_t> MemberLoop::submit_local(std::vector<Request> fresh) {
  MemberMessage message;
  for (Request& request : fresh) {
    const bool cacheable = ResponseCache::cacheable(request.op);
    const int32_t slot = cacheable ? cache_.lookup(request) : -1;
    if (cacheable) telemetry_.cache_lookup(slot >= 0);
    if (slot >= 0) message.cached_slots.push_back(static_cast<uint32_t>(slot));
    else message.requests.push_back(std::move(request));
  }
  return encode(message);
}

std::vector<Response> MemberLoop::on_message(const ControlMessage& message) {
  const std::string coordinator = "global rank " + std::to_string(options_.global_ranks[0]);
  if (message.closed) {
    if (failure_ && failure_->left) return {};  // it said goodbye first
    if (closing_.active()) return {};
    const std::string reason = message.unreachable.empty()
                                   ? "the control connection to the coordinator, " + coordinator +
                                         (message.address.empty() ? "" : " (at " + message.address + ")") +
                                         ", closed (its process exited or shut the set down)"
                                   : "the coordinator, " + coordinator + ", is unreachable: " + message.unreachable;
    failure_ = SetFailure{reason, {0}, false, false};
    return {};
  }
  switch (control_kind(message.bytes)) {
    case ControlKind::kMember:
      break;
    case ControlKind::kCoordinator:
      if (message.from != 0)
        throw Internal("a coordinator message from set rank " + std::to_string(message.from) + " reached set rank " +
                       std::to_string(options_.rank));
      return decode_coordinator_message(message.bytes).responses;
    case ControlKind::kFailure:
      on_failure_message(decode_failure_message(message.bytes));
      return {};
    case ControlKind::kAgreement:
      throw Internal("an agreement message reached set rank " + std::to_string(options_.rank) + "'s member loop");
  }
  throw Internal("a member message reached set rank " + std::to_string(options_.rank));
}

bool MemberLoop::close_once_run() {
  return closing_.settle(agreement_.log_length(), failure_);
}

void MemberLoop::on_failure_message(const FailureMessage& message) {
  using Stage = FailureMessage::Stage;
  const std::string who = "global rank " + std::to_string(options_.global_ranks[0]);
  if (message.stage == Stage::kGoodbye || message.stage == Stage::kClosed) {
    std::vector<int> missing(message.missing.begin(), message.missing.end());
    SetFailure left = message.stage == Stage::kGoodbye
                          ? SetFailure{options_.goodbye_reason(0), {0}, false, false}
                          : SetFailure{message.reason, options_.set_ranks_of(missing), false, true};
    left.left = true;
    left.ran = message.ran;
    if (failure_ || closing_.active()) return;
    if (agreement_.log_length() >= left.ran) {
      failure_ = std::move(left);
      return;
    }
    closing_.start(std::move(left));  // the engine closes it once the log holds what the sender ran
  } else if (message.stage == Stage::kVerdict) {
    failure_ = SetFailure{message.reason, {}, false, true};
  } else if (message.stage == Stage::kProbe) {
    failure_ = SetFailure{"the coordinator (" + who + ") found the set broken: " + message.reason, {}, true, false};
    failure_->coordinator_answered = true;
  } else {
    throw Internal("unexpected failure message (stage " + std::to_string(static_cast<int>(message.stage)) +
                   ") from " + who);
  }
}

// A live coordinator fails an op that waits for the op timeout itself and
// sends its verdict, which normally arrives first. The clock runs from the
// op's submission or from the last op this rank ran, whichever is later (ops
// that wait behind a long collective are not waiting for the coordinator).
MemberLoop::Clock::time_point MemberLoop::inspect(Clock::time_point now, std::optional<Clock::time_point> oldest,
                                                  Clock::time_point last_run) {
  if (!oldest || options_.timeout.count() <= 0) return Clock::time_point::max();
  const Clock::time_point since = std::max(*oldest, last_run);
  const milliseconds patience = options_.timeout + FailureProtocol::coordinator_grace(options_.timeout);
  if (now < since + patience) return since + patience;
  const auto waited = std::chrono::duration_cast<milliseconds>(now - since);
  failure_ = SetFailure{"the coordinator (global rank " + std::to_string(options_.global_ranks[0]) +
                            ") decided nothing for " + std::to_string(waited.count()) +
                            " ms on an op this rank submitted",
                        {}, true, false};
  failure_->waited_out = true;
  return Clock::time_point::max();
}

}  // namespace hora
