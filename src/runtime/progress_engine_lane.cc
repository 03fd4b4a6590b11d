// The fast lane of a process set's engine (see progress_engine.h and
// src/transport/shm/fast_lane.h): submitting cached ops through shared
// memory, running the lane's log (engine thread or a waiting caller), and
// the coordinator's share — responses into the log, diverted rows, and
// stall reports for ops that wait in the lane.
#include <algorithm>
#include <utility>

#include "hora/errors.h"
#include "runtime/progress_engine.h"

namespace hora {

using shm::FastLane;

// Any thread, with state_mutex_ held.
int32_t ProgressEngine::lane_slot(const Request& request) {
  if (!ResponseCache::cacheable(request.op)) return -1;
  std::lock_guard<std::mutex> lock(lane_slots_mutex_);
  auto it = lane_slot_by_name_.find(request.name);
  if (it == lane_slot_by_name_.end() || !(lane_requests_[it->second] == request)) return -1;
  return static_cast<int32_t>(it->second);
}

// An op the caller will not wait for at once is the engine thread's to run:
// it watches the log before the op can appear there.
void ProgressEngine::lane_submit(uint32_t slot, bool caller_waits) {
  lane_pending_.fetch_add(1);
  if (!caller_waits) lane_->watch(FastLane::kEngine, true);
  if (lane_->submit(slot) == FastLane::Outcome::kDiverted && !caller_waits) wake();
}

void ProgressEngine::drive(const Work& work) {
  if (!lane_) return;
  drivers_.fetch_add(1);
  std::unique_lock<std::mutex> role(executor_);
  lane_->watch(FastLane::kDriver, true);
  auto give_up = [&] { return work.finished() || failing_.load() || stopping_.load(); };
  bool failed = false;
  try {
    while (!give_up()) {
      std::optional<FastLane::Entry> entry = lane_->entry(next_entry_);
      if (!entry) {
        lane_->wait_for_entry(next_entry_, give_up);
        continue;
      }
      if (!run_lane_entry(*entry, false)) break;
    }
  } catch (...) {
    failed = true;
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (!driver_failure_) driver_failure_ = std::current_exception();
  }
  lane_->watch(FastLane::kDriver, false);
  role.unlock();
  drivers_.fetch_sub(1);
  // What is left (a response, others' ops, a failure) is the engine's.
  if (failed || lane_pending_.load() > 0 || lane_->entry_waiting()) control_->wake();
}

// Engine thread. A driver's failure becomes the set's.
void ProgressEngine::run_lane() {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (driver_failure_) std::rethrow_exception(std::exchange(driver_failure_, nullptr));
  }
  std::unique_lock<std::mutex> role(executor_, std::try_to_lock);
  if (role) {
    while (!failing_ && !stopping_) {
      std::optional<FastLane::Entry> entry = lane_->entry(next_entry_);
      if (!entry || !run_lane_entry(*entry, true)) break;
    }
  }
  update_engine_watch();
}

// The engine thread watches the log while responses wait for their entries
// (the coordinator sends them before it appends the entries), and while
// lane ops wait here and no caller runs the log (a driver wakes this thread
// when it leaves with ops pending). Cleared, the watch is looked at again,
// so a submitter that set it meanwhile is never undone.
void ProgressEngine::update_engine_watch() {
  auto wanted = [this] { return !responses_.empty() || (lane_pending_.load() > 0 && drivers_.load() == 0); };
  if (wanted()) return lane_->watch(FastLane::kEngine, true);
  lane_->watch(FastLane::kEngine, false);
  if (wanted()) lane_->watch(FastLane::kEngine, true);
}

// Runs one log entry with the executor role held; false when it is not
// this thread's to run (a response: only the engine thread has them) or
// the set is failing.
bool ProgressEngine::run_lane_entry(const FastLane::Entry& entry, bool engine) {
  // An op failed here (the other thread's collective threw): the set's
  // verdict fails it, and nothing runs before that.
  if (!running_.empty()) return false;
  if (entry.response) {
    if (!engine || responses_.empty()) return false;
    Response response = std::move(responses_.front());
    responses_.pop_front();
    lane_->set_consumed(++next_entry_);
    execute(std::move(response));
    return true;
  }
  lane_->set_consumed(++next_entry_);
  run_cached(entry.slot);
  return true;
}

void ProgressEngine::run_cached(uint32_t slot) {
  std::string name;
  {
    std::lock_guard<std::mutex> lock(lane_slots_mutex_);
    if (slot >= lane_requests_.size())
      throw Internal("the fast lane's log names cache slot " + std::to_string(slot) + ", which this rank lacks");
    name = lane_requests_[slot].name;
  }
  running_.clear();
  running_.push_back(queue_.take(name));
  Response response;
  response.op = running_.front().request.op;
  run_op(response, running_);
  lane_pending_.fetch_sub(1);
  running_.front().work->complete();
  running_.clear();
}

// Every rank mirrors the response cache's first kLaneRows slots, in the
// order of the response stream, for submitters to look up.
void ProgressEngine::remember_cached(const Response& response) {
  for (size_t i = 0; i < running_.size() && i < response.cache.size(); ++i) {
    if (!response.cache[i]) continue;
    const Request& request = running_[i].request;
    std::lock_guard<std::mutex> lock(lane_slots_mutex_);
    const auto slot = static_cast<uint32_t>(lane_requests_.size());
    if (slot >= shm::kLaneRows) return;
    if (coordinator() && negotiator_->cache().lookup(request) != static_cast<int32_t>(slot))
      throw Internal("the fast lane's cache mirror disagrees with the response cache at slot " + std::to_string(slot));
    lane_slot_by_name_[request.name] = slot;
    lane_requests_.push_back(request);
  }
}

void ProgressEngine::wake_drivers() {
  if (lane_) lane_->wake_drivers();
}

// Coordinator. Responses enter the log in order once there is room; the
// members get their contents before the entries appear.
void ProgressEngine::dispatch_through_lane(std::vector<Response> ready) {
  for (Response& response : ready) {
    for (const std::string& name : response.names) inspector_->finished(name);
    undispatched_.push_back(std::move(response));
  }
  if (all_diverted_) divert_all();  // slots the new responses cache
  size_t count = 0;
  while (count < undispatched_.size() && lane_->has_room(count + 1)) ++count;
  if (count == 0) return;
  CoordinatorMessage message;
  for (size_t i = 0; i < count; ++i) {
    message.responses.push_back(std::move(undispatched_.front()));
    undispatched_.pop_front();
  }
  const std::vector<uint8_t> bytes = encode(message);
  for (int member = 1; member < backend_->size(); ++member) control_->send(member, bytes);
  for (size_t i = 0; i < count; ++i) lane_->append_response();
  update_diversions(message.responses);
  for (Response& response : message.responses) responses_.push_back(std::move(response));
}

// The coordinator negotiates the op in `slot` from now on, starting with the
// submissions the row holds.
void ProgressEngine::divert(uint32_t slot) {
  diverted_.insert(slot);
  lane_waits_.erase(slot);  // its stall clock goes on under the negotiator
  const std::vector<int> members = lane_->divert(slot);
  if (members.empty()) return;
  const auto now = Clock::now();
  const Request& cached = negotiator_->cache().request(slot);
  inspector_->submitted(cached.name, now);
  for (int member : members) {
    negotiator_->submit_cached(member, slot);
    telemetry_.submitted(cached.name, cached.op, member, now);
  }
}

void ProgressEngine::divert_all() {
  const size_t rows = std::min<size_t>(shm::kLaneRows, negotiator_->cache().size());
  for (uint32_t slot = 0; slot < rows; ++slot) divert(slot);
}

// Before the coordinator negotiates a full request: a join takes every row
// back until all have joined; a request named like a cached op that is not
// equal to it takes that op's row back, so that the negotiator sees every
// member's version.
void ProgressEngine::divert_for(const Request& request) {
  if (request.op == OpType::kJoin) {
    all_diverted_ = true;
    divert_all();
    return;
  }
  const int32_t slot = negotiator_->cache().slot_of(request.name);
  if (slot >= 0 && static_cast<uint64_t>(slot) < shm::kLaneRows) divert(static_cast<uint32_t>(slot));
}

void ProgressEngine::drain_diverted() {
  if (!lane_->take_drain_request()) return;
  for (uint32_t slot : std::vector<uint32_t>(diverted_.begin(), diverted_.end())) divert(slot);
}

// A diverted row returns to the lane once no submission of its op is
// pending anywhere (none in the row, none in the negotiator).
void ProgressEngine::release(uint32_t slot) {
  divert(slot);
  if (negotiator_->has_pending(negotiator_->cache().request(slot).name)) return;
  if (lane_->try_undivert(slot)) diverted_.erase(slot);
}

void ProgressEngine::update_diversions(const std::vector<Response>& dispatched) {
  if (all_diverted_ && !negotiator_->any_joined()) {
    all_diverted_ = false;
    for (uint32_t slot : std::vector<uint32_t>(diverted_.begin(), diverted_.end())) release(slot);
    return;
  }
  if (all_diverted_) return;
  for (const Response& response : dispatched) {
    for (size_t i = 0; i < response.names.size(); ++i) {
      const int32_t slot = i < response.slots.size() && response.slots[i] >= 0
                               ? response.slots[i]
                               : negotiator_->cache().slot_of(response.names[i]);
      if (slot >= 0 && diverted_.count(static_cast<uint32_t>(slot))) release(static_cast<uint32_t>(slot));
    }
  }
}

// Ops some members submitted through the lane and others not yet: their
// stall clocks run from when an inspection first saw them waiting.
void ProgressEngine::inspect_lane(Clock::time_point now) {
  // The lane's slots are a prefix of the coordinator's response cache.
  const size_t rows = std::min<size_t>(shm::kLaneRows, negotiator_->cache().size());
  for (uint32_t slot = 0; slot < rows; ++slot) {
    const std::string& name = negotiator_->cache().request(slot).name;
    FastLane::RowState state = lane_->row_state(slot);
    const bool waiting = !state.submitted.empty() && static_cast<int>(state.submitted.size()) < size();
    auto it = lane_waits_.find(slot);
    if (it != lane_waits_.end() && (!waiting || it->second.completions != state.completions)) {
      inspector_->finished(name);
      lane_waits_.erase(it);
      it = lane_waits_.end();
    }
    if (!waiting) continue;
    if (it == lane_waits_.end()) inspector_->submitted(name, now);
    lane_waits_[slot] = LaneWait{state.completions, std::move(state.submitted)};
  }
}

std::vector<PendingOp> ProgressEngine::lane_pending() const {
  std::vector<PendingOp> pending;
  for (const auto& [slot, wait] : lane_waits_) {
    PendingOp op;
    op.name = negotiator_->cache().request(slot).name;
    op.description = negotiator_->cache().request(slot).describe();
    std::vector<bool> submitted(size(), false);
    for (int r : wait.submitted) submitted[r] = true;
    for (int r = 0; r < size(); ++r)
      (submitted[r] ? op.submitted : op.missing).push_back(options_.global_ranks[r]);
    pending.push_back(std::move(op));
  }
  return pending;
}

}  // namespace hora
