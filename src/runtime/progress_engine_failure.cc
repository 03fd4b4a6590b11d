// What a process set's engine does once the set breaks (the protocol is
// described in progress_engine.h and docs/fault_tolerance.md).
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
#include <algorithm>
#include <optional>

#include "hora/errors.h"
#include "hora/process_set.h"
#include "runtime/progress_engine.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

}  // namespace

std::string ProgressEngine::conclude(SetFailure failure) {
  backend_->abort(failure.reason);
  std::vector<bool> gone(size(), false);
  for (int r : failure.gone) gone[r] = true;
  for (int r = 1; r < size(); ++r)
    if (closed_[r]) gone[r] = true;
  if (failure.needs_census) census(failure.reason, gone);
  std::vector<int> missing;
  for (int r = 0; r < size(); ++r)
    if (gone[r]) missing.push_back(options_.global_ranks[r]);
  const std::string message = broken_message(missing, failure.reason);
  FailureMessage verdict{FailureMessage::Stage::kVerdict, {missing.begin(), missing.end()}, message};
  const std::vector<uint8_t> bytes = encode(verdict);
  for (int r = 1; r < size() && !stopping_; ++r)
    if (!closed_[r]) send_quietly(r, bytes);
  return message;
}

// Marks in `gone` the members that are dead (control connection closed) or
// hung (no answer to the probe within the census window).
void ProgressEngine::census(const std::string& reason, std::vector<bool>& gone) {
  auto unaccounted = [&](int r) { return r != 0 && !gone[r] && !reported_[r] && !closed_[r]; };
  const std::vector<uint8_t> probe = encode(FailureMessage{FailureMessage::Stage::kProbe, {}, reason});
  for (int r = 1; r < size(); ++r)
    if (!gone[r] && !closed_[r] && !send_quietly(r, probe) && unaccounted(r)) gone[r] = true;
  const auto deadline = Clock::now() + census_window(options_.timeout);
  auto waiting = [&] {
    for (int r = 1; r < size(); ++r)
      if (unaccounted(r)) return true;
    return false;
  };
  while (!stopping_ && waiting() && Clock::now() < deadline) {
    std::optional<ControlMessage> message;
    try {
      message = control_->receive(deadline);
    } catch (const std::exception&) {
      break;
    }
    if (!message) continue;
    if (message->closed) {
      closed_[message->from] = true;
      gone[message->from] = true;
      continue;
    }
    try {
      if (control_kind(message->bytes) == ControlKind::kFailure &&
          decode_failure_message(message->bytes).stage == FailureMessage::Stage::kReport)
        reported_[message->from] = true;
    } catch (const Error&) {
      // A malformed message says nothing about who is alive.
    }
  }
  for (int r = 1; r < size(); ++r)
    if (unaccounted(r)) gone[r] = true;
}

std::string ProgressEngine::await_verdict(SetFailure failure) {
  backend_->abort(failure.reason);
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
  for (int r : failure.gone) missing.push_back(options_.global_ranks[r]);
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  return broken_message(missing, failure.reason);
}

// Reports `failure` to the coordinator and returns its verdict. A member
// that has waited the op timeout itself (and not heard from the coordinator
// since) gives it a grace to answer; a probe (the coordinator's census is
// under way) earns it the full verdict wait. Without a verdict, `missed`
// says what the coordinator failed to do.
std::optional<std::string> ProgressEngine::receive_verdict(const SetFailure& failure, std::string& missed) {
  const std::string coordinator_name = "the coordinator (global rank " + std::to_string(options_.global_ranks[0]) + ")";
  const std::string closed = "then the control connection to " + coordinator_name + " closed";
  // A coordinator that cannot be reached any more may have sent its
  // verdict before it went: what it sent is read before its link's
  // closure, so the wait below returns that verdict, or the closure.
  const bool reported = send_quietly(0, encode(FailureMessage{FailureMessage::Stage::kReport, {}, failure.reason}));
  bool answered = reported && (failure.coordinator_answered || !failure.waited_out);
  milliseconds wait = answered ? verdict_wait(options_.timeout) : coordinator_grace(options_.timeout);
  auto deadline = Clock::now() + wait;
  while (!stopping_ && Clock::now() < deadline) {
    std::optional<ControlMessage> message;
    try {
      message = control_->receive(deadline);
    } catch (const std::exception&) {
      break;
    }
    if (!message) continue;
    if (message->closed) {
      missed = closed;
      return std::nullopt;
    }
    try {
      if (control_kind(message->bytes) != ControlKind::kFailure) continue;
      FailureMessage decoded = decode_failure_message(message->bytes);
      if (decoded.stage == FailureMessage::Stage::kVerdict) return decoded.reason;
      if (decoded.stage == FailureMessage::Stage::kProbe && !answered) {
        answered = true;
        wait = verdict_wait(options_.timeout);
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

std::string ProgressEngine::broken_message(const std::vector<int>& missing_global, const std::string& reason) const {
  std::string out = "process set " + std::to_string(options_.process_set_id) + " " + ranks_string(options_.global_ranks) +
                    " is broken";
  if (!missing_global.empty()) out += "; missing global rank(s) " + ranks_string(missing_global);
  return out + ": " + reason;
}

std::vector<int> ProgressEngine::set_ranks_of(const std::vector<int>& global_ranks) const {
  std::vector<int> out;
  for (int g : global_ranks) {
    auto it = std::lower_bound(options_.global_ranks.begin(), options_.global_ranks.end(), g);
    if (it != options_.global_ranks.end() && *it == g) out.push_back(static_cast<int>(it - options_.global_ranks.begin()));
  }
  return out;
}

// Best effort: the set is broken already, so a peer that cannot be told is
// simply not told. False when the send failed.
bool ProgressEngine::send_quietly(int to, const std::vector<uint8_t>& bytes) {
  try {
    control_->send(to, bytes);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace hora
