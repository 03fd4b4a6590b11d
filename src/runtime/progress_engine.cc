#include "runtime/progress_engine.h"

#include <algorithm>

#include "coordinator/wire.h"
#include "hora/errors.h"
#include "util/caller_waits.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLongestSleep{1000};

}  // namespace

ProgressEngine::ProgressEngine(EngineOptions options, Connect connect, std::shared_ptr<ProgressPool> pool)
    : options_(std::move(options)),
      telemetry_(options_.process_set_id, options_.global_ranks, options_.rank, options_.timeline),
      executor_(options_, queue_, submitter_, telemetry_, stopping_, [this] { wake(); },
                [this](const std::function<bool()>& found, std::chrono::nanoseconds spin) {
                  return look(found, spin);
                }),
      submitter_(options_.process_set_id, queue_, executor_, stopping_),
      pool_(std::move(pool)) {
  thread_ = std::thread([this, connect = std::move(connect)] { run(connect); });
}

ProgressEngine::~ProgressEngine() { stop("process set " + std::to_string(options_.process_set_id) + " was shut down"); }

std::shared_ptr<Work> ProgressEngine::submit(Request request, TensorView input, TensorView output, bool caller_waits) {
  Submitter::Submitted submitted = submitter_.submit(std::move(request), std::move(input), std::move(output),
                                                     weak_from_this());
  if (submitted.slot) {
    const bool fast_path = executor_.enter(*submitted.slot, caller_waits, std::move(submitted.carried));
    telemetry_.cache_lookup(true, fast_path);
    // The engine thread completes an op nobody waits for, so it must hear
    // the peers' messages: a set still lent to a caller is watched by no
    // thread of the pool.
    if (!caller_waits) {
      ProgressPool::Slot* slot = awake_slot_.load();
      if (slot && ProgressPool::lent(*slot)) pool_->notify(*slot);
    }
  } else {
    wake();
  }
  return submitted.work;
}

void ProgressEngine::stop(const std::string& reason, bool goodbye) {
  // A collective in progress would otherwise hold the join up to the
  // timeout; a connection in progress watches the stopping flag.
  const bool first = submitter_.stop(reason, [this, &reason] {
    if (links_) {
      links_->abort(reason);
      links_->wake();
    }
    executor_.wake_drivers();
  });
  if (!first) return;
  if (goodbye) say_goodbye();
  if (thread_.joinable()) thread_.join();
  if (slot_) pool_->remove(*slot_);  // no pool thread runs the set after this
  if (failure_thread_.joinable()) failure_thread_.join();
  auto error = std::make_exception_ptr(InvalidArgument(reason));
  for (TensorEntry& entry : queue_.take_all()) entry.work->fail(error);
  executor_.fail_running(error);
}

// Tells the set's other members (the coordinator, or every member from the
// coordinator) that this member leaves cleanly, so that the set closes
// instead of breaking when its connections close. Best effort: a member
// that cannot be told finds the closure instead.
void ProgressEngine::say_goodbye() {
  SetLinks* links = awake_links_.load();
  if (!links) return;
  const std::vector<uint8_t> goodbye =
      encode(FailureMessage{FailureMessage::Stage::kGoodbye, {}, "", executor_.entries_run()});
  for (int to = options_.coordinator() ? 1 : 0; to < (options_.coordinator() ? options_.size() : 1); ++to) {
    try {
      links->send(to, goodbye);
    } catch (const std::exception&) {
    }
  }
}

void ProgressEngine::wake() {
  if (ProgressPool::Slot* slot = awake_slot_.load()) pool_->notify(*slot);
  else if (SetLinks* links = awake_links_.load()) links->wake();
}

// The connecting thread: hands the set to the pool, or runs it.
void ProgressEngine::run(const Connect& connect) {
  if (!connect_links(connect)) return;
  if (pool_ && links_->control().armable()) {
    slot_ = pool_->add_and_run(*this);
    awake_slot_ = slot_.get();
    pool_->notify(*slot_);  // for a submission that woke the control plane meanwhile
    return;
  }
  serve();
  conclude_failure();
}

// Decides who is missing after the set broke, and fails everything with
// the verdict; nothing when it was stopped (stop() fails what is left).
void ProgressEngine::conclude_failure() {
  std::optional<SetFailure>& failed = failure();
  if (stopping_ || !failed) return;
  FailureProtocol protocol(options_, *links_, stopping_);
  // A set that a member left cleanly is closed, unless ops of this rank
  // were still waiting in it: those are lost, and it counts as broken.
  // A member that leaves cleanly ran every op agreed before it left: so
  // does this one.
  if (failed->left) executor_.finish_agreed();
  const bool lost_ops = queue_.oldest_submission().has_value();
  const bool closed = failed->left && !lost_ops;
  const std::string message = coordinator_ ? protocol.conclude(std::move(*failed), coordinator_->closed(),
                                                               coordinator_->reported(), lost_ops)
                                           : protocol.await_verdict(std::move(*failed), lost_ops);
  if (closed) telemetry_.closed(message);
  else telemetry_.broken(message);
  fail_everything(std::make_exception_ptr(PeerFailure(message)));
}

// Connects the set and makes its loop; false (everything failed) when that
// failed or was cancelled.
bool ProgressEngine::connect_links(const Connect& connect) {
  try {
    auto links = std::make_unique<SetLinks>(connect(stopping_));
    if (options_.coordinator()) coordinator_.emplace(options_, links->agreement(), telemetry_);
    else member_.emplace(options_, links->agreement(), telemetry_);
    submitter_.connected([&](const std::string* stop_reason) {
      links_ = std::move(links);
      if (coordinator_) executor_.attach(*links_, coordinator_->cache(), nullptr);
      else executor_.attach(*links_, member_->cache(), &member_->cache());
      telemetry_.connected(links_->fast_lane() ? "shm" : options_.transport);
      awake_links_ = links_.get();
      if (stop_reason) links_->abort(*stop_reason);
    });
    return true;
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    if (stopping_) error = std::make_exception_ptr(InvalidArgument(submitter_.stop_reason()));
    fail_everything(error);
    return false;
  }
}

std::optional<SetFailure>& ProgressEngine::failure() {
  return coordinator_ ? coordinator_->failure() : member_->failure();
}

// Without a pool: negotiates and runs ops until stopped or the set breaks,
// sleeping on the control plane in between.
void ProgressEngine::serve() {
  while (!stopping_ && !failure()) {
    try {
      const Clock::time_point due = step();
      if (failure()) break;
      if (std::optional<ControlMessage> message = links_->receive(due)) on_message(*message);
    } catch (const std::exception& e) {
      record_failure(e);
    }
  }
}

// With a pool: does what there is to do, reading every control message
// already there, and returns when it must run again.
std::optional<ProgressEngine::Clock::time_point> ProgressEngine::serve_once(bool driver) {
  Clock::time_point due = Clock::time_point::max();
  try {
    bool busy = false;  // the next message is likely soon
    while (!stopping_ && !failure()) {
      busy |= !queue_.empty();  // ops of this rank wait in the set
      due = step(!driver);
      if (failure()) break;
      if (std::optional<ControlMessage> message =
              driver ? links_->receive_now() : links_->receive(Clock::time_point::min())) {
        on_message(*message);
        busy = true;
        continue;
      }
      // As a thread of the set's own would, look a moment longer before
      // the pool arms the set (a negotiation round trip is that short);
      // a driver looks again itself.
      if (driver || !busy || !links_->control().await_briefly()) break;
      busy = false;
    }
  } catch (const std::exception& e) {
    record_failure(e);
  }
  if (stopping_) return std::nullopt;
  if (failure()) {
    failure_thread_ = std::thread([this] { conclude_failure(); });
    return std::nullopt;
  }
  return due;
}

bool ProgressEngine::look(const std::function<bool()>& found, std::chrono::nanoseconds spin) {
  ProgressPool::Slot* slot = awake_slot_.load();
  if (!slot || !pool_->borrow(*slot)) return false;
  const CallerLooking looking;
  std::optional<Clock::time_point> due;
  bool seen = false;
  unsigned looks = 0;
  // Every 16th look (the first too) runs the set's whole loop: others'
  // submissions, the coordinator's dispatch, inspections, every
  // connection. The looks between read the connection the last record
  // came on.
  links_->agreement().look(
      [&] {
        if (looks++ % 16 == 0 || !look_for_records()) due = serve_once(/*driver=*/true);
        return !due || (seen = found());
      },
      spin);
  // A coordinator that relays records must have them read while its
  // caller computes.
  pool_->give_back(*slot, due, seen && !links_->agreement().relays());
  return seen;
}

bool ProgressEngine::look_for_records() {
  try {
    control::Agreement& agreement = links_->agreement();
    agreement.attend();
    std::optional<ControlMessage> message = links_->control().receive_from(records_from_);
    if (!message) return true;
    const bool record = !message->closed && control_kind(message->bytes) == ControlKind::kAgreement;
    on_message(*message);
    return record && !agreement.drain_requested();
  } catch (const std::exception& e) {
    record_failure(e);
  }
  return false;
}

// A collective or a control message failed; who is missing is not known
// yet. A member whose collective failed after it had run nothing for the
// op timeout has waited that long itself.
void ProgressEngine::record_failure(const std::exception& e) {
  SetFailure failed{e.what(), {}, true, false};
  failed.waited_out =
      !coordinator_ && options_.timeout.count() > 0 && Clock::now() - executor_.last_run() >= options_.timeout;
  failure() = std::move(failed);
}

// Takes new submissions, negotiates, runs the log and inspects when due;
// returns when the loop must look again even if no message arrives.
ProgressEngine::Clock::time_point ProgressEngine::step(bool run_log) {
  links_->agreement().attend();
  const bool closing = coordinator_ ? coordinator_->close_once_run() : member_->close_once_run();
  if (failure()) return Clock::now();
  std::vector<Request> fresh = queue_.take_new();
  note_requests(fresh);
  auto now = Clock::now();
  if (coordinator_) {
    if (!fresh.empty()) coordinator_->submit_local(std::move(fresh), now);
    dispatch(now);
  } else if (!fresh.empty()) {
    links_->send(0, member_->submit_local(std::move(fresh)));
  }
  if (run_log) executor_.run_log();
  now = Clock::now();
  if (now >= next_inspection_) {
    next_inspection_ = inspect(now);
    if (failure()) return now + kLongestSleep;
  }
  // Responses waiting for room in the log, ops an inspection gave up, or a
  // goodbye waiting for the log.
  const bool holding = (coordinator_ && coordinator_->holding()) || closing;
  return std::min(now + (holding ? milliseconds{1} : kLongestSleep), next_inspection_);
}

// Requests named like a cached op the agreement decides are instances of
// it that this member takes part in through the coordinator.
void ProgressEngine::note_requests(const std::vector<Request>& fresh) {
  control::Agreement& agreement = links_->agreement();
  const ResponseCache& cache = coordinator_ ? coordinator_->cache() : member_->cache();
  for (const Request& request : fresh) {
    const int32_t slot = cache.slot_of(request.name);
    if (slot >= 0 && static_cast<size_t>(slot) < agreement.rows()) agreement.took_part(static_cast<uint32_t>(slot));
  }
}

void ProgressEngine::on_message(const ControlMessage& message) {
  if (!message.closed && control_kind(message.bytes) == ControlKind::kAgreement) {
    records_from_ = message.from;
    return links_->agreement().received(message.from, message.bytes);
  }
  if (coordinator_) coordinator_->on_message(message, Clock::now());
  else executor_.deliver(member_->on_message(message));
}

// Coordinator: agreed responses go to every member, then into the log.
void ProgressEngine::dispatch(Clock::time_point now) {
  CoordinatorLoop::Dispatch ready = coordinator_->dispatch(now);
  if (ready.responses.empty()) return;
  links_->agreement().in_order([&] {
    for (int member = 1; member < options_.size(); ++member) links_->send(member, ready.bytes);
    coordinator_->committed(ready, now);
  });
  executor_.deliver(std::move(ready.responses));
}

// Runs the loop's inspection; returns when the next one is due.
ProgressEngine::Clock::time_point ProgressEngine::inspect(Clock::time_point now) {
  const milliseconds interval = coordinator_ ? coordinator_->inspection_interval() : member_->inspection_interval();
  if (interval.count() <= 0) return Clock::time_point::max();
  if (coordinator_) {
    coordinator_->inspect(now);
    return now + interval;
  }
  return std::min(now + interval, member_->inspect(now, queue_.oldest_submission(), executor_.last_run()));
}

// Drivers give up the executor role first (the data plane was aborted, so a
// collective in progress fails at once).
void ProgressEngine::fail_everything(std::exception_ptr error) {
  submitter_.broke(error);
  executor_.give_up();
  for (TensorEntry& entry : queue_.take_all()) entry.work->fail(error);
  executor_.fail_running(error);
}

}  // namespace hora
