#include "runtime/failure_protocol.h"

#include <algorithm>

#include "coordinator/wire.h"
#include "hora/errors.h"

namespace hora {

using std::chrono::milliseconds;

milliseconds FailureProtocol::census_window(milliseconds timeout) {
  if (timeout.count() <= 0) return milliseconds{2000};
  return std::clamp(timeout / 4, milliseconds{200}, milliseconds{2000});
}

milliseconds FailureProtocol::verdict_wait(milliseconds timeout) { return 2 * census_window(timeout) + milliseconds{500}; }

// An eighth of the op timeout, 0.1 to 0.5 s: twice this is what a member
// whose coordinator is stopped waits past the op timeout.
milliseconds FailureProtocol::coordinator_grace(milliseconds timeout) {
  return std::clamp(census_window(timeout) / 2, milliseconds{100}, milliseconds{500});
}

void PendingClose::start(SetFailure left) {
  left_ = std::move(left);
  since_ = Clock::now();
}

bool PendingClose::active() const { return left_.has_value(); }

void PendingClose::also(int member, uint64_t ran) {
  if (!left_) return;
  left_->gone.push_back(member);
  left_->ran = std::max(left_->ran, ran);
}

bool PendingClose::settle(uint64_t log_length, std::optional<SetFailure>& failure) {
  if (!left_) return false;
  if (log_length < left_->ran && Clock::now() - since_ < kClosingGrace) return true;
  if (!failure) failure = std::move(left_);
  left_.reset();
  return false;
}

std::string FailureProtocol::conclude(SetFailure failure, std::vector<bool> closed, std::vector<bool> reported,
                                      bool lost_ops) {
  links_.abort(failure.reason);
  const int size = set_.size();
  std::vector<bool> gone(size, false);
  for (int r : failure.gone) gone[r] = true;
  for (int r = 1; r < size; ++r)
    if (closed[r]) gone[r] = true;
  if (failure.needs_census) census(failure.reason, gone, closed, reported);
  std::vector<int> missing;
  for (int r = 0; r < size; ++r)
    if (gone[r]) missing.push_back(set_.global_ranks[r]);
  const std::string message = outcome(failure, missing, lost_ops);
  // A closed set's members each say for themselves whether it broke for
  // them (ops of theirs were lost): they get the reason, not the message.
  const auto stage = failure.left ? FailureMessage::Stage::kClosed : FailureMessage::Stage::kVerdict;
  FailureMessage verdict{stage, {missing.begin(), missing.end()}, failure.left ? failure.reason : message,
                         failure.left ? failure.ran : 0};
  const std::vector<uint8_t> bytes = encode(verdict);
  for (int r = 1; r < size && !stopping_; ++r)
    if (!closed[r] && !(failure.left && gone[r])) send_quietly(r, bytes);
  return message;
}

// A set a member left cleanly is closed, unless ops of this rank waited in
// it (`lost_ops`): for this rank it is broken then.
std::string FailureProtocol::outcome(const SetFailure& failure, const std::vector<int>& missing_global,
                                     bool lost_ops) const {
  if (failure.left && !lost_ops) return set_.closed_message(failure.reason);
  return set_.broken_message(missing_global, failure.reason);
}

// Marks in `gone` the members that are dead (control connection closed) or
// hung (no answer to the probe within the census window).
void FailureProtocol::census(const std::string& reason, std::vector<bool>& gone, std::vector<bool>& closed,
                             std::vector<bool>& reported) {
  const int size = set_.size();
  auto unaccounted = [&](int r) { return r != 0 && !gone[r] && !reported[r] && !closed[r]; };
  const std::vector<uint8_t> probe = encode(FailureMessage{FailureMessage::Stage::kProbe, {}, reason});
  for (int r = 1; r < size; ++r)
    if (!gone[r] && !closed[r] && !send_quietly(r, probe) && unaccounted(r)) gone[r] = true;
  const auto deadline = Clock::now() + census_window(set_.timeout);
  auto waiting = [&] {
    for (int r = 1; r < size; ++r)
      if (unaccounted(r)) return true;
    return false;
  };
  std::optional<ControlMessage> message;
  while (waiting() && receive(deadline, message)) {
    if (!message) continue;
    if (message->closed) {
      closed[message->from] = true;
      gone[message->from] = true;
      continue;
    }
    try {
      if (control_kind(message->bytes) == ControlKind::kFailure &&
          decode_failure_message(message->bytes).stage == FailureMessage::Stage::kReport)
        reported[message->from] = true;
    } catch (const Error&) {
      // A malformed message says nothing about who is alive.
    }
  }
  for (int r = 1; r < size; ++r)
    if (unaccounted(r)) gone[r] = true;
}

std::string FailureProtocol::await_verdict(SetFailure failure, bool lost_ops) {
  links_.abort(failure.reason);
  if (failure.left) {  // the coordinator left, or told that a member did: nothing to wait for
    std::vector<int> missing;
    for (int r : failure.gone) missing.push_back(set_.global_ranks[r]);
    return outcome(failure, missing, lost_ops);
  }
  if (failure.verdict) return failure.reason;
  const bool coordinator_known_gone = std::find(failure.gone.begin(), failure.gone.end(), 0) != failure.gone.end();
  if (!coordinator_known_gone) {
    std::string missed;
    std::optional<std::string> verdict = receive_verdict(failure, missed);
    if (verdict) return *verdict;
    failure.gone.push_back(0);
    failure.reason += "; " + missed;
  }
  std::vector<int> missing;
  for (int r : failure.gone) missing.push_back(set_.global_ranks[r]);
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  return set_.broken_message(missing, failure.reason);
}

// Reports `failure` to the coordinator and returns its verdict. A member
// that has waited the op timeout itself (and not heard from the coordinator
// since) gives it a grace to answer; a probe (the coordinator's census is
// under way) earns it the full verdict wait. Without a verdict, `missed`
// says what the coordinator failed to do.
std::optional<std::string> FailureProtocol::receive_verdict(const SetFailure& failure, std::string& missed) {
  const std::string coordinator_name = "the coordinator (global rank " + std::to_string(set_.global_ranks[0]) + ")";
  const std::string closed = "then the control connection to " + coordinator_name + " closed";
  // A coordinator that cannot be reached any more may have sent its
  // verdict before it went: what it sent is read before its link's
  // closure, so the wait below returns that verdict, or the closure.
  const bool reported = send_quietly(0, encode(FailureMessage{FailureMessage::Stage::kReport, {}, failure.reason}));
  bool answered = reported && (failure.coordinator_answered || !failure.waited_out);
  milliseconds wait = answered ? verdict_wait(set_.timeout) : coordinator_grace(set_.timeout);
  auto deadline = Clock::now() + wait;
  std::optional<ControlMessage> message;
  while (receive(deadline, message)) {
    if (!message) continue;
    if (message->closed) {
      missed = closed;
      return std::nullopt;
    }
    try {
      if (control_kind(message->bytes) != ControlKind::kFailure) continue;
      FailureMessage decoded = decode_failure_message(message->bytes);
      if (decoded.stage == FailureMessage::Stage::kVerdict || decoded.stage == FailureMessage::Stage::kClosed)
        return decoded.reason;
      if (decoded.stage == FailureMessage::Stage::kProbe && !answered) {
        answered = true;
        wait = verdict_wait(set_.timeout);
        deadline = Clock::now() + wait;
      }
    } catch (const Error&) {
      // Keep waiting for a verdict that decodes.
    }
  }
  missed = !reported ? closed
                     : coordinator_name + (answered ? " gave no verdict within " : " did not answer within ") +
                           std::to_string(wait.count()) + " ms";
  return std::nullopt;
}

// Waits for the next control message (`message`, or none at the deadline);
// false once stopping, past `deadline`, or when the control plane failed.
bool FailureProtocol::receive(Clock::time_point deadline, std::optional<ControlMessage>& message) {
  message.reset();
  if (stopping_ || Clock::now() >= deadline) return false;
  try {
    message = links_.receive(deadline);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// Best effort: the set is broken already, so a peer that cannot be told is
// simply not told. False when the send failed.
bool FailureProtocol::send_quietly(int to, const std::vector<uint8_t>& bytes) {
  try {
    links_.send(to, bytes);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace hora
