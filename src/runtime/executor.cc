#include "runtime/executor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/reduce.h"
#include "hora/errors.h"
#include "util/caller_waits.h"

namespace hora {

using Agreement = control::Agreement;

Executor::Executor(const EngineOptions& options, TensorQueue& queue, JoinLedger& joins,
                   telemetry::SetTelemetry& telemetry, const std::atomic<bool>& stopping,
                   std::function<void()> wake_engine, Look look)
    : options_(options),
      queue_(queue),
      joins_(joins),
      telemetry_(telemetry),
      stopping_(stopping),
      wake_engine_(std::move(wake_engine)),
      look_(std::move(look)),
      runner_(telemetry) {}

void Executor::attach(SetLinks& links, const ResponseCache& cache, ResponseCache* member_cache) {
  links_ = &links;
  cache_ = &cache;
  member_cache_ = member_cache;
}

std::optional<uint32_t> Executor::admit(TensorEntry& entry, const std::weak_ptr<WorkDriver>& driver) {
  const Request& request = entry.request;
  if (!links_ || request.op == OpType::kJoin || !ResponseCache::cacheable(request.op)) return std::nullopt;
  uint32_t slot;
  {
    std::lock_guard<std::mutex> lock(cached_mutex_);
    auto it = slot_by_name_.find(request.name);
    if (it == slot_by_name_.end() || !(cached_requests_[it->second] == request)) return std::nullopt;
    slot = it->second;
  }
  entry.lane = true;
  entry.work->set_driver(driver);
  return slot;
}

bool Executor::enter(uint32_t slot, bool caller_waits, std::vector<uint8_t> carried) {
  agreed_pending_.fetch_add(1);
  if (!caller_waits) agreement().watch(Agreement::kEngine, true);
  Agreement::Outcome outcome;
  if (carried.empty()) {
    outcome = agreement().submit(slot);
  } else {
    // An average travels as a sum, scaled afterwards (collectives/).
    Agreement::Reduction how;
    {
      std::lock_guard<std::mutex> lock(cached_mutex_);
      const Request& request = cached_requests_.at(slot);
      how = {request.dtype, request.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : request.reduce_op};
    }
    outcome = agreement().submit_carrying(slot, std::move(carried), how);
  }
  if (outcome != Agreement::Outcome::kDiverted) return true;
  if (!caller_waits) wake_engine_();
  return false;
}

// What every member decides alike from the cached request alone: a small
// allreduce without prescaling (the carried inputs are the raw ones) and not
// Adasum.
std::vector<uint8_t> Executor::carried_input(const TensorEntry& entry) {
  const Request& request = entry.request;
  const size_t bytes = request.byte_size();
  if (request.op != OpType::kAllreduce || request.reduce_op == ReduceOp::kAdasum || request.prescale != 1.0 ||
      bytes == 0 || bytes > agreement().max_carried_bytes() || entry.input.byte_size() != bytes)
    return {};
  const auto* data = static_cast<const uint8_t*>(entry.input.data);
  return std::vector<uint8_t>(data, data + bytes);
}

void Executor::drive(const Work& work) {
  if (!links_ || agreement().rows() == 0) return;
  drivers_.fetch_add(1);
  std::unique_lock<std::mutex> role(role_);
  agreement().watch(Agreement::kDriver, true);
  const std::function<bool()> give_up = [&] { return work.finished() || failing_.load() || stopping_.load(); };
  bool failed = false;
  try {
    while (!work.finished() && !stopping_) {
      std::optional<Agreement::Entry> entry = agreement().entry(next_entry_);
      // A set that a member left cleanly still runs what every member
      // agreed on before (the member that left ran it).
      if (failing_ && (!entry || !finish_agreed_)) break;
      if (!entry) {
        // The entry comes with a control message: look for it on this
        // thread first (no thread is woken for it), then wait.
        const std::chrono::nanoseconds spin = agreement().look_spin();
        const auto found = [&] { return agreement().has_entry(next_entry_) || give_up(); };
        if (spin <= kUnwatchedSpin || !look_ || !look_(found, spin)) agreement().wait_for_entry(next_entry_, give_up);
        continue;
      }
      if (!run_entry(*entry, false)) break;
    }
  } catch (...) {
    failed = true;
    if (!driver_failure_) driver_failure_ = std::current_exception();
  }
  agreement().watch(Agreement::kDriver, false);
  role.unlock();
  drivers_.fetch_sub(1);
  // What is left (a response, others' ops, a failure) is the engine's.
  if (failed || agreed_pending_.load() > 0 || agreement().entry_waiting()) wake_engine_();
}

void Executor::deliver(std::vector<Response> responses) {
  for (Response& response : responses) {
    responses_.push_back(std::move(response));
    if (!options_.coordinator()) agreement().response_received();
  }
}

void Executor::run_log() {
  std::unique_lock<std::mutex> role(role_, std::try_to_lock);
  if (role) {
    if (driver_failure_) std::rethrow_exception(std::exchange(driver_failure_, nullptr));
    while (!failing_ && !stopping_) {
      std::optional<Agreement::Entry> entry = agreement().entry(next_entry_);
      if (!entry || !run_entry(*entry, true)) break;
    }
  }
  update_engine_watch();
}

// The engine thread watches the log while responses wait for their entries
// (the coordinator sends them before it appends the entries), and while
// agreed ops wait here and no caller runs the log (a driver wakes this
// thread when it leaves with ops pending). Cleared, the watch is looked at
// again, so a submitter that set it meanwhile is never undone.
void Executor::update_engine_watch() {
  auto wanted = [this] { return !responses_.empty() || (agreed_pending_.load() > 0 && drivers_.load() == 0); };
  if (wanted()) return agreement().watch(Agreement::kEngine, true);
  agreement().watch(Agreement::kEngine, false);
  if (wanted()) agreement().watch(Agreement::kEngine, true);
}

// Runs one log entry with the executor role held; false when it is not
// this thread's to run (a response: only the engine thread has them) or
// an op failed here.
bool Executor::run_entry(const Agreement::Entry& entry, bool engine) {
  // An op failed here (the other thread's collective threw): the set's
  // verdict fails it, and nothing runs before that.
  if (!running_.empty()) return false;
  if (entry.response) {
    if (!engine || responses_.empty()) return false;
    Response response = std::move(responses_.front());
    responses_.pop_front();
    agreement().set_consumed(++next_entry_);
    entries_run_.store(next_entry_, std::memory_order_relaxed);
    execute(std::move(response));
    return true;
  }
  agreement().set_consumed(++next_entry_);
  entries_run_.store(next_entry_, std::memory_order_relaxed);
  run_cached(entry);
  return true;
}

namespace {

// The data plane of an allreduce whose inputs the agreement carried: every
// member reduces them alike, in order, and nothing moves (a host agreement
// carries the sum alone). Its size is the set's, which an average divides by.
class CarriedInputs final : public Backend {
 public:
  CarriedInputs(int rank, int size, const Agreement::Carried& inputs) : rank_(rank), size_(size), inputs_(inputs) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    const size_t bytes = count * dtype_size(dtype);
    for (const std::vector<uint8_t>& input : inputs_)
      if (input.size() != bytes)
        throw Internal("a carried input holds " + std::to_string(input.size()) + " bytes, the allreduce " +
                       std::to_string(bytes));
    std::memcpy(buf, inputs_.front().data(), bytes);
    for (size_t member = 1; member < inputs_.size(); ++member)
      reduce_into(buf, inputs_[member].data(), count, dtype, op);
  }
  void allgatherv(const void*, void*, const std::vector<size_t>&) override { refuse("allgather"); }
  void broadcast(void*, size_t, int) override { refuse("broadcast"); }
  void alltoallv(const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&) override {
    refuse("alltoall");
  }
  void barrier() override { refuse("barrier"); }
  void abort(const std::string&) override {}

 private:
  [[noreturn]] static void refuse(const char* op) {
    throw Internal(std::string("a carried op ran a ") + op);
  }
  const int rank_;
  const int size_;
  const Agreement::Carried& inputs_;
};

}  // namespace

void Executor::run_cached(const Agreement::Entry& entry) {
  const uint32_t slot = entry.slot;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(cached_mutex_);
    if (slot >= cached_requests_.size())
      throw Internal("the fast lane's log names cache slot " + std::to_string(slot) + ", which this rank lacks");
    name = cached_requests_[slot].name;
  }
  running_.clear();
  running_.push_back(queue_.take(name));
  Response response;
  response.op = running_.front().request.op;
  if (entry.carried) {
    CarriedInputs inputs(links_->data().rank(), links_->data().size(), *entry.carried);
    runner_.run(inputs, response, running_);
  } else {
    runner_.run(links_->data(), response, running_);
  }
  agreed_pending_.fetch_sub(1);
  running_.front().work->complete();
  running_.clear();
}

// Runs one agreed response (engine thread). If it throws, its entries stay
// in running_ and fail with the set's verdict.
void Executor::execute(Response response) {
  running_.clear();
  if (response.op == OpType::kJoin) return finish_join(response);
  // An op given up (diverged members) lists the members whose submission
  // it fails; another member's op of that name, submitted since, waits on.
  const bool given_up = !response.error.empty() && !response.sizes.empty();
  const bool mine = std::find(response.sizes.begin(), response.sizes.end(), options_.rank) != response.sizes.end();
  for (size_t i = 0; i < response.names.size(); ++i) {
    if (response.slots[i] >= 0) response.names[i] = cache_->request(static_cast<uint32_t>(response.slots[i])).name;
    if (given_up && !mine) {
      // Its unnamed ops keep the names the others give theirs.
      joins_.stood_in(response.op, response.names[i]);
      took_part(response, i);
      continue;
    }
    std::optional<TensorEntry> own = queue_.try_take(response.names[i]);
    if (own) running_.push_back(std::move(*own));
    else if (response.error.empty()) running_.push_back(stand_in(response, i));
    else stand_in(response, i);  // checks that this member has joined; the op fails on the others only
  }
  if (!response.error.empty()) {
    telemetry_.failed(response.op, response.names, response.error);
    for (TensorEntry& entry : running_) {
      if (entry.lane) agreed_pending_.fetch_sub(1);
      entry.work->fail(std::make_exception_ptr(Mismatch(response.error)));
    }
    running_.clear();
    return;
  }
  if (member_cache_)
    for (size_t i = 0; i < running_.size(); ++i)
      if (response.cache[i]) member_cache_->insert(running_[i].request);
  remember_cached(response);
  runner_.run(links_->data(), response, running_);
  for (TensorEntry& entry : running_) {
    if (entry.lane) agreed_pending_.fetch_sub(1);
    entry.work->complete();
  }
  running_.clear();
}

// This joined member's share of the op `response.names[index]`, which it
// did not submit; Internal when it has not joined.
TensorEntry Executor::stand_in(const Response& response, size_t index) {
  const std::string& name = response.names[index];
  if (!joins_.joined()) throw Internal("the coordinator scheduled '" + name + "', which this rank never submitted");
  joins_.stood_in(response.op, name);
  took_part(response, index);
  TensorEntry entry;
  entry.stand_in = true;
  entry.work = std::make_shared<Work>();
  if (index < response.requests.size()) entry.request = response.requests[index];
  else if (response.error.empty())
    throw Internal("the coordinator scheduled '" + name + "' for a joined rank without describing it");
  return entry;
}

// This member stood in for the response's op `index`: the agreement counts
// the instance when the op is one it decides (not the instance that caches
// it, which no member counts).
void Executor::took_part(const Response& response, size_t index) {
  if (index < response.cache.size() && response.cache[index]) return;
  const int32_t slot = cache_->slot_of(response.names[index]);
  if (slot >= 0 && static_cast<size_t>(slot) < agreement().rows()) agreement().took_part(static_cast<uint32_t>(slot));
}

// Every member has joined: this member's join op completes with the global
// rank of the member that joined last, and it may submit again.
void Executor::finish_join(const Response& response) {
  if (response.sizes.size() != 1) throw Internal("a join response without the rank that joined last");
  running_.push_back(queue_.take(kJoinName));
  const auto last = static_cast<int32_t>(response.sizes.front());
  std::memcpy(running_.front().work->allocate_output(sizeof last, {1}), &last, sizeof last);
  joins_.join_finished();
  running_.front().work->complete();
  running_.clear();
}

// Every rank mirrors the response cache's first rows() slots, in the order
// of the responses, for submitters to look up.
void Executor::remember_cached(const Response& response) {
  for (size_t i = 0; i < running_.size() && i < response.cache.size(); ++i) {
    if (!response.cache[i]) continue;
    const Request& request = running_[i].request;
    std::lock_guard<std::mutex> lock(cached_mutex_);
    const auto slot = static_cast<uint32_t>(cached_requests_.size());
    if (slot >= agreement().rows()) return;
    if (!member_cache_ && cache_->lookup(request) != static_cast<int32_t>(slot))
      throw Internal("the fast lane's cache mirror disagrees with the response cache at slot " + std::to_string(slot));
    slot_by_name_[request.name] = slot;
    cached_requests_.push_back(request);
  }
}

// Drivers run what the log holds and leave; this thread runs what is left
// there (the engine thread no longer runs).
void Executor::finish_agreed() {
  if (!links_) return;
  finish_agreed_ = true;
  give_up();
  std::lock_guard<std::mutex> role(role_);
  try {
    while (std::optional<Agreement::Entry> entry = agreement().entry(next_entry_))
      if (!run_entry(*entry, true)) break;
  } catch (const std::exception&) {
    // The op stays in running_: the set's verdict fails it.
  }
}

void Executor::give_up() {
  failing_ = true;
  wake_drivers();
}

void Executor::fail_running(std::exception_ptr error) {
  std::lock_guard<std::mutex> role(role_);
  for (TensorEntry& entry : running_) entry.work->fail(error);
  running_.clear();
}

void Executor::wake_drivers() {
  if (links_) agreement().wake_drivers();
}

}  // namespace hora
