#include "runtime/progress_engine.h"

#include <algorithm>

#include "hora/errors.h"
#include "util/log.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLongestSleep{1000};

}  // namespace

ProgressEngine::ProgressEngine(EngineOptions options, Connect connect)
    : options_(std::move(options)), member_cache_(options_.cache_capacity) {
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

std::shared_ptr<Work> ProgressEngine::submit(Request request, TensorView input, TensorView output) {
  auto work = std::make_shared<Work>();
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (stopping_) throw InvalidArgument(stop_reason_);
    if (request.name.empty())
      request.name = std::string(op_type_name(request.op)) + ".noname." +
                     std::to_string(++noname_counters_[request.op]);
    if (broken_) {
      work->fail(broken_);
      return work;
    }
    queue_.push(TensorEntry{std::move(request), std::move(input), std::move(output), work, Clock::now()});
  }
  wake();
  return work;
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
      backend_->wake();
    }
  }
  if (thread_.joinable()) thread_.join();
  auto error = std::make_exception_ptr(InvalidArgument(reason));
  for (TensorEntry& entry : queue_.take_all()) entry.work->fail(error);
  for (TensorEntry& entry : running_) entry.work->fail(error);
  running_.clear();
}

void ProgressEngine::wake() {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (backend_) backend_->wake();
}

void ProgressEngine::wait_connected() {
  std::unique_lock<std::mutex> lock(state_mutex_);
  connected_cv_.wait(lock, [this] { return connected_ || broken_; });
  if (!connected_ && broken_) std::rethrow_exception(broken_);
}

void ProgressEngine::run(const Connect& connect) {
  try {
    std::unique_ptr<Backend> backend = connect(stopping_);
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      backend_ = std::move(backend);
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
    }
  }
}

void ProgressEngine::step() {
  std::vector<Request> fresh = queue_.take_new();
  if (!fresh.empty()) negotiate_local(std::move(fresh));
  if (coordinator()) dispatch_ready();
  const auto now = Clock::now();
  auto deadline = now + kLongestSleep;
  if (inspection_interval_.count() > 0) {
    if (now >= next_inspection_) {
      next_inspection_ = now + inspection_interval_;
      inspect(now);
      if (failure_) return;
    }
    deadline = std::min(deadline, next_inspection_);
  }
  std::optional<ControlMessage> message = backend_->receive_control(deadline);
  if (message) on_message(*message);
}

// The coordinator warns about, and fails, ops that members never submit. A
// member gives up on a coordinator that decides nothing for longer than the
// op timeout plus the time a verdict may take.
void ProgressEngine::inspect(Clock::time_point now) {
  if (coordinator()) {
    StallReport report = inspector_->inspect(now, [this] { return negotiator_->pending(); });
    if (!report.warning.empty()) log_warning(report.warning);
    if (report.failure) failure_ = SetFailure{report.failure->reason, set_ranks_of(report.failure->missing), false, false};
    return;
  }
  const milliseconds patience = options_.timeout + verdict_wait(options_.timeout);
  std::optional<Clock::time_point> oldest = queue_.oldest_submission();
  if (!oldest || now - *oldest < patience) return;
  failure_ = SetFailure{"the coordinator (global rank " + std::to_string(options_.global_ranks[0]) +
                            ") decided nothing for " + std::to_string(patience.count()) +
                            " ms on an op this rank submitted",
                        {}, true, false};
}

// New local requests: the coordinator records them directly, a member sends
// them, as cache slots where the response cache knows them.
void ProgressEngine::negotiate_local(std::vector<Request> fresh) {
  MemberMessage message;
  const auto now = Clock::now();
  for (Request& request : fresh) {
    int32_t slot = ResponseCache::cacheable(request.op) ? cache().lookup(request) : -1;
    if (coordinator()) {
      inspector_->submitted(request.name, now);
      if (slot >= 0) negotiator_->submit_cached(0, static_cast<uint32_t>(slot));
      else negotiator_->submit(0, std::move(request));
    } else if (slot >= 0) {
      message.cached_slots.push_back(static_cast<uint32_t>(slot));
    } else {
      message.requests.push_back(std::move(request));
    }
  }
  if (coordinator()) return;
  backend_->send_control(0, encode(message));
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
      for (Response& response : decode_coordinator_message(message.bytes).responses) execute(std::move(response));
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
    inspector_->submitted(negotiator_->cache().request(slot).name, now);
  }
  for (Request& request : decoded.requests) {
    inspector_->submitted(request.name, now);
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
    failure_ = SetFailure{who + " reported: " + message.reason, {}, true, false};
  } else if (!coordinator() && message.stage == Stage::kVerdict) {
    failure_ = SetFailure{message.reason, {}, false, true};
  } else if (!coordinator() && message.stage == Stage::kProbe) {
    failure_ = SetFailure{"the coordinator (" + who + ") found the set broken: " + message.reason, {}, true, false};
  } else {
    throw Internal("unexpected failure message (stage " + std::to_string(static_cast<int>(message.stage)) +
                   ") from " + who);
  }
}

void ProgressEngine::dispatch_ready() {
  std::vector<Response> ready = negotiator_->ready();
  if (ready.empty()) return;
  for (const Response& response : ready)
    for (const std::string& name : response.names) inspector_->finished(name);
  std::vector<uint8_t> bytes = encode(CoordinatorMessage{ready});
  for (int member = 1; member < backend_->size(); ++member) backend_->send_control(member, bytes);
  for (Response& response : ready) execute(std::move(response));
}

// Runs one agreed op. If it throws, its entries stay in running_ and fail
// with the set's verdict.
void ProgressEngine::execute(Response response) {
  running_.clear();
  for (size_t i = 0; i < response.names.size(); ++i) {
    if (response.slots[i] >= 0) response.names[i] = cache().request(static_cast<uint32_t>(response.slots[i])).name;
    running_.push_back(queue_.take(response.names[i]));
  }
  if (!coordinator())
    for (size_t i = 0; i < running_.size(); ++i)
      if (response.cache[i]) member_cache_.insert(running_[i].request);
  if (!response.error.empty()) {
    for (TensorEntry& entry : running_) entry.work->fail(std::make_exception_ptr(Mismatch(response.error)));
  } else {
    run_op(response, running_);
    for (TensorEntry& entry : running_) entry.work->complete();
  }
  running_.clear();
}

void ProgressEngine::run_op(const Response& response, std::vector<TensorEntry>& entries) {
  const Request& head = entries.front().request;
  AllreduceOptions options{head.dtype, head.reduce_op, head.prescale, head.postscale};
  switch (response.op) {
    case OpType::kAllreduce: {
      std::vector<AllreducePart> parts;
      for (TensorEntry& entry : entries) parts.push_back({entry.input, entry.output});
      allreduce(*backend_, parts, options, fusion_);
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
  }
  throw Internal("unknown op type in response");
}

void ProgressEngine::fail_everything(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    broken_ = error;
  }
  connected_cv_.notify_all();
  for (TensorEntry& entry : queue_.take_all()) entry.work->fail(error);
  for (TensorEntry& entry : running_) entry.work->fail(error);
  running_.clear();
}

}  // namespace hora
