#include "runtime/coordinator_loop.h"

#include <algorithm>

#include "hora/errors.h"
#include "util/log.h"

namespace hora {

using std::chrono::milliseconds;

CoordinatorLoop::CoordinatorLoop(const EngineOptions& options, control::Agreement& agreement,
                                 telemetry::SetTelemetry& telemetry)
    : options_(options),
      agreement_(agreement),
      telemetry_(telemetry),
      negotiator_(NegotiatorOptions{options.process_set_id, options.global_ranks, options.fusion_threshold,
                                    options.cache_capacity}),
      inspector_(options.process_set_id, options.global_ranks,
                 StallOptions{options.stall_warning_time, options.stall_shutdown_time, options.timeout,
                              StallOptions{}.divergence_time, options.divergence_timeout}),
      closed_(options.size(), false),
      reported_(options.size(), false) {}

void CoordinatorLoop::submit_local(std::vector<Request> fresh, Clock::time_point now) {
  for (Request& request : fresh) {
    const bool cacheable = ResponseCache::cacheable(request.op);
    const int32_t slot = cacheable ? negotiator_.cache().lookup(request) : -1;
    if (cacheable) telemetry_.cache_lookup(slot >= 0);
    telemetry_.submitted(request.name, request.op, 0, now);
    if (request.op != OpType::kJoin) inspector_.submitted(request.name, now);
    if (slot >= 0) {
      negotiator_.submit_cached(0, static_cast<uint32_t>(slot));
      continue;
    }
    divert_for(request, now);
    negotiator_.submit(0, std::move(request));
  }
}

void CoordinatorLoop::on_message(const ControlMessage& message, Clock::time_point now) {
  const std::string who = "global rank " + std::to_string(options_.global_ranks[message.from]);
  if (message.closed) {
    closed_[message.from] = true;
    if (failure_ && failure_->left) return;  // it said goodbye first
    if (said_goodbye_.count(message.from)) return;  // its goodbye waits for the log
    const std::string at = message.address.empty() ? "" : " (at " + message.address + ")";
    const std::string reason = message.unreachable.empty()
                                   ? "the control connection to " + who + at +
                                         " closed (its process exited or shut the set down)"
                                   : who + " is unreachable: " + message.unreachable;
    failure_ = SetFailure{reason, {message.from}, false, false};
    return;
  }
  switch (control_kind(message.bytes)) {
    case ControlKind::kMember:
      return on_member_message(message.from, message.bytes, now);
    case ControlKind::kCoordinator:
      break;
    case ControlKind::kFailure:
      return on_failure_message(message.from, decode_failure_message(message.bytes), now);
    case ControlKind::kAgreement:
      throw Internal("an agreement message from " + who + " reached the coordinator loop");
  }
  throw Internal("a coordinator message from set rank " + std::to_string(message.from) + " reached set rank 0");
}

void CoordinatorLoop::on_member_message(int from, const std::vector<uint8_t>& bytes, Clock::time_point now) {
  MemberMessage decoded = decode_member_message(bytes);
  for (uint32_t slot : decoded.cached_slots) {
    negotiator_.submit_cached(from, slot);
    const Request& cached = negotiator_.cache().request(slot);
    inspector_.submitted(cached.name, now);
    telemetry_.submitted(cached.name, cached.op, from, now);
  }
  for (Request& request : decoded.requests) {
    telemetry_.submitted(request.name, request.op, from, now);
    if (request.op != OpType::kJoin) inspector_.submitted(request.name, now);
    divert_for(request, now);
    negotiator_.submit(from, std::move(request));
  }
}

bool CoordinatorLoop::close_once_run() {
  return closing_.settle(agreement_.log_length(), failure_);
}

void CoordinatorLoop::on_failure_message(int from, const FailureMessage& message, Clock::time_point now) {
  const std::string who = "global rank " + std::to_string(options_.global_ranks[from]);
  if (message.stage == FailureMessage::Stage::kGoodbye) {
    said_goodbye_.insert(from);
    if (failure_) return;
    if (closing_.active()) {
      closing_.also(from, message.ran);  // several members leaving at once
      return;
    }
    SetFailure left{options_.goodbye_reason(from), {from}, false, false};
    left.left = true;
    left.ran = message.ran;
    if (agreement_.log_length() < message.ran) {
      closing_.start(std::move(left));
      return;
    }
    failure_ = std::move(left);
    return;
  }
  if (message.stage != FailureMessage::Stage::kReport)
    throw Internal("unexpected failure message (stage " + std::to_string(static_cast<int>(message.stage)) +
                   ") from " + who);
  reported_[from] = true;
  // A member that gave up waiting for an op reports it a grace after the op
  // timeout, by its own clock, which may have started up to an inspection
  // interval before this coordinator's (an op agreed without the coordinator
  // is timed from the first inspection that sees it waiting): ops that old
  // by that clock fail naming the ranks that never submitted them, as
  // without the report.
  inspect(now, inspection_interval());
  if (!failure_) failure_ = SetFailure{who + " reported: " + message.reason, {}, true, false};
}

CoordinatorLoop::Dispatch CoordinatorLoop::dispatch(Clock::time_point now) {
  if (agreement_.take_drain_request())
    for (uint32_t slot : std::vector<uint32_t>(diverted_.begin(), diverted_.end())) divert(slot, now);
  std::vector<Response> ready = negotiator_.ready();
  note_agreed(ready, now);
  for (Response& response : ready) {
    for (const std::string& name : response.names) inspector_.finished(name);
    undispatched_.push_back(std::move(response));
  }
  if (all_diverted_) divert_all(now);  // slots the new responses cache
  size_t count = 0;
  while (count < undispatched_.size() && agreement_.has_room(count + 1)) ++count;
  Dispatch out;
  if (count == 0) return out;
  for (size_t i = 0; i < count; ++i) {
    out.responses.push_back(std::move(undispatched_.front()));
    undispatched_.pop_front();
  }
  out.bytes = encode(CoordinatorMessage{out.responses});
  return out;
}

void CoordinatorLoop::committed(const Dispatch& sent, Clock::time_point now) {
  for (size_t i = 0; i < sent.responses.size(); ++i) agreement_.append_response();
  update_diversions(sent.responses, now);
}

// `ready` left negotiation (telemetry).
void CoordinatorLoop::note_agreed(const std::vector<Response>& ready, Clock::time_point now) {
  if (ready.empty()) return;
  telemetry_.cycle();
  for (const Response& response : ready)
    for (size_t i = 0; i < response.names.size(); ++i) {
      const bool by_slot = i < response.slots.size() && response.slots[i] >= 0;
      const std::string& name =
          by_slot ? negotiator_.cache().request(static_cast<uint32_t>(response.slots[i])).name : response.names[i];
      telemetry_.agreed(name, response.names.size() > 1, now);
    }
}

// The slots the agreement decides: a prefix of the response cache.
size_t CoordinatorLoop::agreed_rows() const { return std::min(agreement_.rows(), negotiator_.cache().size()); }

// The coordinator negotiates the op in `slot` from now on, starting with the
// submissions the agreement held.
void CoordinatorLoop::divert(uint32_t slot, Clock::time_point now) {
  diverted_.insert(slot);
  waits_.erase(slot);  // its stall clock goes on under the negotiator
  const std::vector<int> members = agreement_.divert(slot);
  if (members.empty()) return;
  const Request& cached = negotiator_.cache().request(slot);
  inspector_.submitted(cached.name, now);
  for (int member : members) {
    negotiator_.submit_cached(member, slot);
    telemetry_.submitted(cached.name, cached.op, member, now);
  }
}

void CoordinatorLoop::divert_all(Clock::time_point now) {
  const size_t rows = agreed_rows();
  for (uint32_t slot = 0; slot < rows; ++slot) take_back(slot, now);
}

// The coordinator takes `slot` back for a new reason (not only to collect
// what landed in it since): Agreement::divert_anew(), then divert().
void CoordinatorLoop::take_back(uint32_t slot, Clock::time_point now) {
  agreement_.divert_anew(slot);
  divert(slot, now);
}

// Before the coordinator negotiates a full request: a join takes every slot
// back until all have joined; a request named like a cached op that is not
// equal to it takes that op's slot back, so that the negotiator sees every
// member's version.
void CoordinatorLoop::divert_for(const Request& request, Clock::time_point now) {
  if (request.op == OpType::kJoin) {
    all_diverted_ = true;
    divert_all(now);
    return;
  }
  const int32_t slot = negotiator_.cache().slot_of(request.name);
  if (slot >= 0 && static_cast<size_t>(slot) < agreement_.rows()) take_back(static_cast<uint32_t>(slot), now);
}

// A diverted slot returns to the agreement once no submission of its op is
// pending anywhere (none held by the agreement, none in the negotiator).
void CoordinatorLoop::release(uint32_t slot, Clock::time_point now) {
  divert(slot, now);
  if (negotiator_.has_pending(negotiator_.cache().request(slot).name)) return;
  if (agreement_.try_undivert(slot)) diverted_.erase(slot);
}

void CoordinatorLoop::update_diversions(const std::vector<Response>& dispatched, Clock::time_point now) {
  if (all_diverted_ && !negotiator_.any_joined()) {
    all_diverted_ = false;
    for (uint32_t slot : std::vector<uint32_t>(diverted_.begin(), diverted_.end())) release(slot, now);
    return;
  }
  if (all_diverted_) return;
  for (const Response& response : dispatched) {
    for (size_t i = 0; i < response.names.size(); ++i) {
      const int32_t slot = i < response.slots.size() && response.slots[i] >= 0
                               ? response.slots[i]
                               : negotiator_.cache().slot_of(response.names[i]);
      if (slot >= 0 && diverted_.count(static_cast<uint32_t>(slot))) release(static_cast<uint32_t>(slot), now);
    }
  }
}

void CoordinatorLoop::inspect(Clock::time_point now, milliseconds head_start) {
  inspect_agreement(now);
  StallReport report = inspector_.inspect(now + head_start, [this] {
    std::vector<PendingOp> pending = negotiator_.pending();
    for (PendingOp& op : agreement_pending()) pending.push_back(std::move(op));
    return pending;
  });
  if (!report.warning.empty()) {
    log_warning(report.warning);
    telemetry_.stall(report.warning);
  }
  if (report.failure && report.failure->diverged) return abandon(report.failure->reason, now);
  if (report.failure)
    failure_ = SetFailure{report.failure->reason, options_.set_ranks_of(report.failure->missing), false, false};
}

// Diverged members will not agree on the ops they wait on, but every one of
// them is alive and may agree on the next: those ops fail with `reason` on
// the members that submitted them and the set goes on. Submissions the
// agreement holds join the negotiator first (their slots come back once the
// error responses are dispatched).
void CoordinatorLoop::abandon(const std::string& reason, Clock::time_point now) {
  std::vector<uint32_t> held;
  for (const auto& [slot, wait] : waits_) held.push_back(slot);
  for (uint32_t slot : held) take_back(slot, now);
  for (Response& response : negotiator_.abandon(reason)) {
    for (const std::string& name : response.names) inspector_.finished(name);
    undispatched_.push_back(std::move(response));
  }
}

// Ops some members submitted through the agreement and others not yet:
// their stall clocks run from when an inspection first saw them waiting.
// One that the agreement holds partly out of sight (other hosts' rows) is
// taken back by the last inspection before it would be reported, so that
// the negotiator learns every submitter and the report names only the
// members that are missing (a host that is merely late keeps the fast
// path).
void CoordinatorLoop::inspect_agreement(Clock::time_point now) {
  const milliseconds report = inspector_.report_time(), interval = inspector_.inspection_interval();
  // Whether an op waiting since `since` would be reported before the next
  // inspection.
  const auto reported_next = [&](Clock::time_point since) {
    return report.count() > 0 && now - since + interval >= report;
  };
  const size_t rows = agreed_rows();
  for (uint32_t slot = 0; slot < rows; ++slot) {
    const std::string& name = negotiator_.cache().request(slot).name;
    control::Agreement::RowState state = agreement_.row_state(slot);
    const bool waiting = !state.submitted.empty() && static_cast<int>(state.submitted.size()) < options_.size();
    auto it = waits_.find(slot);
    if (it != waits_.end() && (!waiting || it->second.completions != state.completions)) {
      inspector_.finished(name);
      waits_.erase(it);
      it = waits_.end();
    }
    if (!waiting) continue;
    if (it == waits_.end()) inspector_.submitted(name, now);
    const Clock::time_point since = it == waits_.end() ? now : it->second.since;
    if (state.unseen && reported_next(since)) {
      take_back(slot, now);  // its stall clock goes on under the negotiator
      continue;
    }
    waits_[slot] = AgreementWait{state.completions, std::move(state.submitted), since};
  }
  // An op the negotiator holds while its slot is being given back in steps:
  // members may have submitted it where the slot is the agreement's again
  // (another host's row), out of sight; taken back likewise, by the last
  // inspection before the op would be reported.
  for (uint32_t slot : std::vector<uint32_t>(diverted_.begin(), diverted_.end())) {
    const std::string& name = negotiator_.cache().request(slot).name;
    if (!negotiator_.has_pending(name) || !agreement_.partly_given_back(slot)) continue;
    const std::optional<Clock::time_point> since = inspector_.since(name);
    if (since && reported_next(*since)) take_back(slot, now);
  }
}

std::vector<PendingOp> CoordinatorLoop::agreement_pending() const {
  std::vector<PendingOp> pending;
  for (const auto& [slot, wait] : waits_) {
    PendingOp op;
    op.name = negotiator_.cache().request(slot).name;
    op.description = negotiator_.cache().request(slot).describe();
    std::vector<bool> submitted(options_.size(), false);
    for (int r : wait.submitted) submitted[r] = true;
    for (int r = 0; r < options_.size(); ++r)
      (submitted[r] ? op.submitted : op.missing).push_back(options_.global_ranks[r]);
    pending.push_back(std::move(op));
  }
  return pending;
}

}  // namespace hora
