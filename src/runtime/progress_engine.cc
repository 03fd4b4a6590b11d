#include "runtime/progress_engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "hora/errors.h"
#include "util/log.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLongestSleep{1000};

}  // namespace

ProgressEngine::ProgressEngine(EngineOptions options, Connect connect)
    : options_(std::move(options)),
      telemetry_(options_.process_set_id, options_.global_ranks, options_.rank, options_.timeline),
      member_cache_(options_.cache_capacity) {
  if (coordinator()) {
    negotiator_.emplace(NegotiatorOptions{options_.process_set_id, options_.global_ranks,
                                          options_.fusion_threshold, options_.cache_capacity});
    inspector_.emplace(options_.process_set_id, options_.global_ranks,
                       StallOptions{options_.stall_warning_time, options_.stall_shutdown_time, options_.timeout});
    inspection_interval_ = inspector_->inspection_interval();
  } else if (options_.timeout.count() > 0) {
    inspection_interval_ = std::clamp(options_.timeout / 4, milliseconds{10}, kLongestSleep);
  }
  thread_ = std::thread([this, connect = std::move(connect)] { run(connect); });
}

ProgressEngine::~ProgressEngine() { stop("process set " + std::to_string(options_.process_set_id) + " was shut down"); }

milliseconds ProgressEngine::census_window(milliseconds timeout) {
  if (timeout.count() <= 0) return milliseconds{2000};
  return std::clamp(timeout / 4, milliseconds{200}, milliseconds{2000});
}

milliseconds ProgressEngine::verdict_wait(milliseconds timeout) { return 2 * census_window(timeout) + milliseconds{500}; }

// An eighth of the op timeout, 0.1 to 0.5 s: twice this is what a member
// whose coordinator is stopped waits past the op timeout.
milliseconds ProgressEngine::coordinator_grace(milliseconds timeout) {
  return std::clamp(census_window(timeout) / 2, milliseconds{100}, milliseconds{500});
}

std::shared_ptr<Work> ProgressEngine::submit(Request request, TensorView input, TensorView output, bool caller_waits) {
  auto work = std::make_shared<Work>();
  int32_t slot = -1;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (stopping_) throw InvalidArgument(stop_reason_);
    if (broken_) {
      work->fail(broken_);
      return work;
    }
    const bool join = request.op == OpType::kJoin;
    if (joined_)
      throw InvalidArgument("this rank called join() on process set " + std::to_string(options_.process_set_id) +
                            (join ? " already" : " and may not submit " + std::string(op_type_name(request.op)) +
                                                     (request.name.empty() ? "" : " '" + request.name + "'")) +
                            "; join() returns once every member has joined");
    if (join)
      request.name = kJoinName;
    else if (request.name.empty())
      request.name = std::string(op_type_name(request.op)) + ".noname." +
                     std::to_string(++noname_counters_[request.op]);
    claim_name(request, work);
    if (lane_ && !join) slot = lane_slot(request);
    TensorEntry entry{std::move(request), std::move(input), std::move(output), work, Clock::now()};
    entry.lane = slot >= 0;
    if (entry.lane) work->set_driver(weak_from_this());
    queue_.push(std::move(entry), !entry.lane);
    joined_ = join;
  }
  if (slot >= 0) {
    telemetry_.cache_lookup(true);
    lane_submit(static_cast<uint32_t>(slot), caller_waits);
  } else {
    wake();
  }
  return work;
}

namespace {

// An op's name is free again once the op has finished and this rank has seen
// that: it waited for the op (or polled it done), or it submitted another op
// on the set after the op had finished. So a rank that submits the same name
// twice in a row is refused however fast the first op finished, and a name
// is never held by a finished op for longer than the next submission.
bool name_is_free(const WorkRecord& earlier, uint64_t submitted_before) {
  const int64_t finished_at = earlier.finished_at.load();
  if (finished_at < 0) return false;
  return earlier.observed.load() || submitted_before > static_cast<uint64_t>(finished_at);
}

}  // namespace

// Called with state_mutex_ held. Entries whose names are free are dropped
// whenever the table has doubled since the last sweep.
void ProgressEngine::claim_name(const Request& request, const std::shared_ptr<Work>& work) {
  const uint64_t submitted_before = submit_count_.load();
  auto it = in_flight_.find(request.name);
  if (it != in_flight_.end() && !name_is_free(*it->second, submitted_before))
    throw InvalidArgument(std::string(op_type_name(request.op)) + " '" + request.name +
                          "': this rank already has an op of that name in flight on process set " +
                          std::to_string(options_.process_set_id) +
                          "; names of concurrent ops must be unique (wait for the first one)");
  if (in_flight_.size() >= sweep_in_flight_at_) {
    std::erase_if(in_flight_,
                  [&](const auto& entry) { return name_is_free(*entry.second, submitted_before); });
    sweep_in_flight_at_ = std::max<size_t>(64, 2 * in_flight_.size());
  }
  auto record = std::make_shared<WorkRecord>(submit_count_);
  work->set_record(record);
  in_flight_[request.name] = std::move(record);
  submit_count_.fetch_add(1);
}

void ProgressEngine::stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (stopping_) return;
    stop_reason_ = reason;
    stopping_ = true;
    // A collective in progress would otherwise hold the join up to the
    // timeout; a connect() in progress watches stopping_.
    if (backend_) {
      backend_->abort(reason);
      control_->wake();
    }
    wake_drivers();
  }
  if (thread_.joinable()) thread_.join();
  auto error = std::make_exception_ptr(InvalidArgument(reason));
  for (TensorEntry& entry : queue_.take_all()) entry.work->fail(error);
  std::lock_guard<std::mutex> role(executor_);
  for (TensorEntry& entry : running_) entry.work->fail(error);
  running_.clear();
}

void ProgressEngine::wake() {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (control_) control_->wake();
}

void ProgressEngine::wait_connected() {
  std::unique_lock<std::mutex> lock(state_mutex_);
  connected_cv_.wait(lock, [this] { return connected_ || broken_; });
  if (!connected_ && broken_) std::rethrow_exception(broken_);
}

void ProgressEngine::run(const Connect& connect) {
  try {
    SetTransports transports = connect(stopping_);
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      backend_ = std::move(transports.backend);
      control_ = std::move(transports.control);
      lane_ = transports.fast_lane;
      telemetry_.connected(lane_ ? "shm" : options_.transport);
      connected_ = true;
      if (stopping_) backend_->abort(stop_reason_);
    }
    connected_cv_.notify_all();
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    if (stopping_) {
      std::lock_guard<std::mutex> lock(state_mutex_);
      error = std::make_exception_ptr(InvalidArgument(stop_reason_));
    }
    fail_everything(error);
    return;
  }
  closed_.assign(size(), false);
  reported_.assign(size(), false);
  serve();
  if (stopping_ || !failure_) return;  // stop() fails what is left
  const std::string message = coordinator() ? conclude(std::move(*failure_)) : await_verdict(std::move(*failure_));
  telemetry_.broken(message);
  fail_everything(std::make_exception_ptr(PeerFailure(message)));
}

// Negotiates and runs ops until stopped or the set breaks.
void ProgressEngine::serve() {
  while (!stopping_ && !failure_) {
    try {
      step();
    } catch (const std::exception& e) {
      // A collective or a control message failed; who is missing is not
      // known yet.
      failure_ = SetFailure{e.what(), {}, true, false};
      failure_->waited_out = !coordinator() && ran_nothing_for_op_timeout(Clock::now());
    }
  }
}

void ProgressEngine::step() {
  std::vector<Request> fresh = queue_.take_new();
  if (!fresh.empty()) negotiate_local(std::move(fresh));
  if (coordinator()) {
    if (lane_) drain_diverted();
    dispatch_ready();
  }
  if (lane_) run_lane();
  const auto now = Clock::now();
  auto deadline = now + (undispatched_.empty() ? kLongestSleep : milliseconds{1});
  if (inspection_interval_.count() > 0) {
    if (now >= next_inspection_) {
      next_inspection_ = now + inspection_interval_;
      inspect(now);
      if (failure_) return;
    }
    deadline = std::min(deadline, next_inspection_);
  }
  std::optional<ControlMessage> message = control_->receive(deadline);
  if (message) on_message(*message);
}

// The coordinator warns about, and fails, ops that members never submit;
// `head_start` is added to the ages of the ops it times.
void ProgressEngine::inspect(Clock::time_point now, milliseconds head_start) {
  if (!coordinator()) return inspect_coordinator(now);
  if (lane_) inspect_lane(now);
  StallReport report = inspector_->inspect(now + head_start, [this] {
    std::vector<PendingOp> pending = negotiator_->pending();
    for (PendingOp& op : lane_pending()) pending.push_back(std::move(op));
    return pending;
  });
  if (!report.warning.empty()) {
    log_warning(report.warning);
    telemetry_.stall(report.warning);
  }
  if (report.failure) failure_ = SetFailure{report.failure->reason, set_ranks_of(report.failure->missing), false, false};
}

// A member gives up on a coordinator that decides nothing on an op waiting
// here for the op timeout plus a grace: a live coordinator fails such an op
// itself at the op timeout and sends its verdict, which normally arrives
// first. The clock runs from the op's submission or from the last op this
// rank ran, whichever is later (ops that wait behind a long collective are
// not waiting for the coordinator). The next inspection comes no later than
// the give-up time.
void ProgressEngine::inspect_coordinator(Clock::time_point now) {
  std::optional<Clock::time_point> oldest = queue_.oldest_submission();
  if (!oldest) return;
  const Clock::time_point since = std::max(*oldest, Clock::time_point(Clock::duration(last_run_.load())));
  const milliseconds patience = options_.timeout + coordinator_grace(options_.timeout);
  if (now < since + patience) {
    next_inspection_ = std::min(next_inspection_, since + patience);
    return;
  }
  const auto waited = std::chrono::duration_cast<milliseconds>(now - since);
  failure_ = SetFailure{"the coordinator (global rank " + std::to_string(options_.global_ranks[0]) +
                            ") decided nothing for " + std::to_string(waited.count()) +
                            " ms on an op this rank submitted",
                        {}, true, false};
  failure_->waited_out = true;
}

// Whether this rank has run no op on the set for the op timeout: a
// collective that failed now had waited that long.
bool ProgressEngine::ran_nothing_for_op_timeout(Clock::time_point now) const {
  if (options_.timeout.count() <= 0) return false;
  return now - Clock::time_point(Clock::duration(last_run_.load())) >= options_.timeout;
}

// New local requests: the coordinator records them directly, a member sends
// them, as cache slots where the response cache knows them.
void ProgressEngine::negotiate_local(std::vector<Request> fresh) {
  MemberMessage message;
  const auto now = Clock::now();
  for (Request& request : fresh) {
    const bool cacheable = ResponseCache::cacheable(request.op);
    int32_t slot = cacheable ? cache().lookup(request) : -1;
    if (cacheable) telemetry_.cache_lookup(slot >= 0);
    if (coordinator()) {
      telemetry_.submitted(request.name, request.op, 0, now);
      if (request.op != OpType::kJoin) inspector_->submitted(request.name, now);
      if (slot >= 0) {
        negotiator_->submit_cached(0, static_cast<uint32_t>(slot));
        continue;
      }
      if (lane_) divert_for(request);
      negotiator_->submit(0, std::move(request));
    } else if (slot >= 0) {
      message.cached_slots.push_back(static_cast<uint32_t>(slot));
    } else {
      message.requests.push_back(std::move(request));
    }
  }
  if (coordinator()) return;
  control_->send(0, encode(message));
}

void ProgressEngine::on_message(const ControlMessage& message) {
  if (message.closed) return on_closed(message.from);
  switch (control_kind(message.bytes)) {
    case ControlKind::kMember:
      return on_member_message(message.from, message.bytes);
    case ControlKind::kCoordinator:
      if (coordinator() || message.from != 0)
        throw Internal("a coordinator message from set rank " + std::to_string(message.from) + " reached set rank " +
                       std::to_string(options_.rank));
      for (Response& response : decode_coordinator_message(message.bytes).responses) {
        if (lane_) responses_.push_back(std::move(response));  // run when the lane's log reaches it
        else execute(std::move(response));
      }
      return;
    case ControlKind::kFailure:
      return on_failure_message(message.from, decode_failure_message(message.bytes));
  }
}

void ProgressEngine::on_member_message(int from, const std::vector<uint8_t>& bytes) {
  if (!coordinator()) throw Internal("a member message reached set rank " + std::to_string(options_.rank));
  MemberMessage decoded = decode_member_message(bytes);
  const auto now = Clock::now();
  for (uint32_t slot : decoded.cached_slots) {
    negotiator_->submit_cached(from, slot);
    const Request& cached = negotiator_->cache().request(slot);
    inspector_->submitted(cached.name, now);
    telemetry_.submitted(cached.name, cached.op, from, now);
  }
  for (Request& request : decoded.requests) {
    telemetry_.submitted(request.name, request.op, from, now);
    if (request.op != OpType::kJoin) inspector_->submitted(request.name, now);
    if (lane_) divert_for(request);
    negotiator_->submit(from, std::move(request));
  }
}

void ProgressEngine::on_closed(int from) {
  const std::string who = "global rank " + std::to_string(options_.global_ranks[from]);
  if (coordinator()) {
    closed_[from] = true;
    failure_ = SetFailure{"the control connection to " + who + " closed (its process exited or shut the set down)",
                          {from}, false, false};
  } else {
    failure_ = SetFailure{"the control connection to the coordinator, " + who +
                              ", closed (its process exited or shut the set down)",
                          {0}, false, false};
  }
}

void ProgressEngine::on_failure_message(int from, const FailureMessage& message) {
  using Stage = FailureMessage::Stage;
  const std::string who = "global rank " + std::to_string(options_.global_ranks[from]);
  if (coordinator() && message.stage == Stage::kReport) {
    reported_[from] = true;
    // A member that gave up waiting for an op reports it a grace after the
    // op timeout, by its own clock, which may have started up to an
    // inspection interval before this coordinator's (an op in the fast lane
    // is timed from the first inspection that sees it waiting): ops that old
    // by that clock fail naming the ranks that never submitted them, as
    // without the report.
    inspect(Clock::now(), inspection_interval_);
    if (!failure_) failure_ = SetFailure{who + " reported: " + message.reason, {}, true, false};
  } else if (!coordinator() && message.stage == Stage::kVerdict) {
    failure_ = SetFailure{message.reason, {}, false, true};
  } else if (!coordinator() && message.stage == Stage::kProbe) {
    failure_ = SetFailure{"the coordinator (" + who + ") found the set broken: " + message.reason, {}, true, false};
    failure_->coordinator_answered = true;
  } else {
    throw Internal("unexpected failure message (stage " + std::to_string(static_cast<int>(message.stage)) +
                   ") from " + who);
  }
}

void ProgressEngine::dispatch_ready() {
  std::vector<Response> ready = negotiator_->ready();
  note_agreed(ready);
  if (lane_) return dispatch_through_lane(std::move(ready));
  if (ready.empty()) return;
  for (const Response& response : ready)
    for (const std::string& name : response.names) inspector_->finished(name);
  std::vector<uint8_t> bytes = encode(CoordinatorMessage{ready});
  for (int member = 1; member < backend_->size(); ++member) control_->send(member, bytes);
  for (Response& response : ready) execute(std::move(response));
}

// Coordinator: `ready` left negotiation (telemetry).
void ProgressEngine::note_agreed(const std::vector<Response>& ready) {
  if (ready.empty()) return;
  telemetry_.cycle();
  const auto now = Clock::now();
  for (const Response& response : ready)
    for (size_t i = 0; i < response.names.size(); ++i) {
      const bool by_slot = i < response.slots.size() && response.slots[i] >= 0;
      const std::string& name =
          by_slot ? negotiator_->cache().request(static_cast<uint32_t>(response.slots[i])).name : response.names[i];
      telemetry_.agreed(name, response.names.size() > 1, now);
    }
}

// Runs one agreed op. If it throws, its entries stay in running_ and fail
// with the set's verdict.
void ProgressEngine::execute(Response response) {
  running_.clear();
  if (response.op == OpType::kJoin) return finish_join(response);
  for (size_t i = 0; i < response.names.size(); ++i) {
    if (response.slots[i] >= 0) response.names[i] = cache().request(static_cast<uint32_t>(response.slots[i])).name;
    std::optional<TensorEntry> own = queue_.try_take(response.names[i]);
    if (own) running_.push_back(std::move(*own));
    else if (response.error.empty()) running_.push_back(stand_in(response, i));
    else stand_in(response, i);  // checks that this member has joined; the op fails on the others only
  }
  if (!response.error.empty()) {
    telemetry_.failed(response.op, response.names, response.error);
    for (TensorEntry& entry : running_) {
      if (entry.lane) lane_pending_.fetch_sub(1);
      entry.work->fail(std::make_exception_ptr(Mismatch(response.error)));
    }
    running_.clear();
    return;
  }
  if (!coordinator())
    for (size_t i = 0; i < running_.size(); ++i)
      if (response.cache[i]) member_cache_.insert(running_[i].request);
  if (lane_) remember_cached(response);
  zero_stand_ins(running_);
  run_op(response, running_);
  for (TensorEntry& entry : running_) {
    if (entry.lane) lane_pending_.fetch_sub(1);
    entry.work->complete();
  }
  running_.clear();
}

// This joined member's share of the op `response.names[index]`, which it
// did not submit; Internal when it has not joined.
TensorEntry ProgressEngine::stand_in(const Response& response, size_t index) {
  bool joined;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    joined = joined_;
  }
  const std::string& name = response.names[index];
  if (!joined) throw Internal("the coordinator scheduled '" + name + "', which this rank never submitted");
  // Standing in for the others' unnamed op counts as this member's own, so
  // that its later unnamed ops keep the names the others give theirs.
  const std::string unnamed = std::string(op_type_name(response.op)) + ".noname.";
  if (name.compare(0, unnamed.size(), unnamed) == 0) {
    const int64_t number = std::strtoll(name.c_str() + unnamed.size(), nullptr, 10);
    std::lock_guard<std::mutex> lock(state_mutex_);
    noname_counters_[response.op] = std::max(noname_counters_[response.op], number);
  }
  TensorEntry entry;
  entry.stand_in = true;
  entry.work = std::make_shared<Work>();
  if (index < response.requests.size()) entry.request = response.requests[index];
  else if (response.error.empty())
    throw Internal("the coordinator scheduled '" + name + "' for a joined rank without describing it");
  return entry;
}

// Stand-ins read zeros and write into the same scratch memory: a fused
// allreduce packs every input before it unpacks any output.
void ProgressEngine::zero_stand_ins(std::vector<TensorEntry>& entries) {
  size_t bytes = 0;
  for (const TensorEntry& entry : entries)
    if (entry.stand_in) bytes = std::max(bytes, entry.request.byte_size());
  if (bytes == 0) return;
  std::byte* zeros = stand_in_zeros_.reserve(bytes);
  std::memset(zeros, 0, bytes);
  for (TensorEntry& entry : entries) {
    if (!entry.stand_in) continue;
    entry.input = TensorView{zeros, entry.request.dtype, entry.request.shape};
    entry.output = entry.input;
  }
}

// Every member has joined: this member's join op completes with the global
// rank of the member that joined last, and it may submit again.
void ProgressEngine::finish_join(const Response& response) {
  if (response.sizes.size() != 1) throw Internal("a join response without the rank that joined last");
  running_.push_back(queue_.take(kJoinName));
  const auto last = static_cast<int32_t>(response.sizes.front());
  std::memcpy(running_.front().work->allocate_output(sizeof last, {1}), &last, sizeof last);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    joined_ = false;
  }
  running_.front().work->complete();
  running_.clear();
}

// Any executor (the engine thread or a driver); notes when this rank ran.
void ProgressEngine::run_op(const Response& response, std::vector<TensorEntry>& entries) {
  telemetry::OpTimes times;
  times.start = Clock::now();
  last_run_.store(times.start.time_since_epoch().count());
  run_collective(response, entries, times);
  times.end = Clock::now();
  last_run_.store(times.end.time_since_epoch().count());
  run_tensors_.clear();
  for (const TensorEntry& entry : entries)
    run_tensors_.push_back(
        {&entry.request.name, entry.request.byte_size(), entry.submitted, !entry.stand_in, entry.lane});
  telemetry_.executed(response.op, run_tensors_, times);
}

void ProgressEngine::run_collective(const Response& response, std::vector<TensorEntry>& entries,
                                    telemetry::OpTimes& times) {
  const Request& head = entries.front().request;
  AllreduceOptions options{head.dtype, head.reduce_op, head.prescale, head.postscale};
  switch (response.op) {
    case OpType::kAllreduce: {
      std::vector<AllreducePart> parts;
      for (TensorEntry& entry : entries) parts.push_back({entry.input, entry.output});
      FusionTimes fusion_times;
      allreduce(*backend_, parts, options, fusion_, &fusion_times);
      times.packed = fusion_times.packed;
      times.transported = fusion_times.reduced;
      return;
    }
    case OpType::kAllgather:
      allgather(*backend_, entries.front().input, response.sizes, *entries.front().work);
      return;
    case OpType::kBroadcast:
      broadcast(*backend_, entries.front().input, entries.front().output, head.root);
      return;
    case OpType::kAlltoall:
      alltoall(*backend_, entries.front().input, response.sizes, *entries.front().work);
      return;
    case OpType::kReducescatter:
      reducescatter(*backend_, entries.front().input, entries.front().output, options, fusion_);
      return;
    case OpType::kBarrier:
      if (backend_->size() > 1) backend_->barrier();
      return;
    case OpType::kJoin:
      break;  // finish_join() completes joins
  }
  throw Internal("unknown op type in response");
}

// Drivers give up the executor role first (the backend was aborted, so a
// collective in progress fails at once).
void ProgressEngine::fail_everything(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    broken_ = error;
  }
  connected_cv_.notify_all();
  failing_ = true;
  wake_drivers();
  for (TensorEntry& entry : queue_.take_all()) entry.work->fail(error);
  std::lock_guard<std::mutex> role(executor_);
  for (TensorEntry& entry : running_) entry.work->fail(error);
  running_.clear();
}

}  // namespace hora
