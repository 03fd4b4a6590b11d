#include "runtime/submitter.h"

#include <algorithm>
#include <cstdlib>

#include "hora/errors.h"

namespace hora {

Submitter::Submitted Submitter::submit(Request request, TensorView input, TensorView output,
                                       const std::weak_ptr<WorkDriver>& driver) {
  Submitted out{std::make_shared<Work>(), std::nullopt, {}};
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) throw InvalidArgument(stop_reason_);
  if (broken_) {
    out.work->fail(broken_);
    return out;
  }
  const bool join = request.op == OpType::kJoin;
  if (joined_)
    throw InvalidArgument("this rank called join() on process set " + std::to_string(process_set_id_) +
                          (join ? " already" : " and may not submit " + std::string(op_type_name(request.op)) +
                                                   (request.name.empty() ? "" : " '" + request.name + "'")) +
                          "; join() returns once every member has joined");
  if (join)
    request.name = kJoinName;
  else if (request.name.empty())
    request.name = std::string(op_type_name(request.op)) + ".noname." + std::to_string(++noname_counters_[request.op]);
  claim_name(request, out.work);
  TensorEntry entry{std::move(request), std::move(input), std::move(output), out.work,
                    std::chrono::steady_clock::now()};
  out.slot = executor_.admit(entry, driver);
  if (out.slot) out.carried = executor_.carried_input(entry);
  queue_.push(std::move(entry), !out.slot);
  joined_ = join;
  return out;
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

// Called with mutex_ held. Entries whose names are free are dropped
// whenever the table has doubled since the last sweep.
void Submitter::claim_name(const Request& request, const std::shared_ptr<Work>& work) {
  const uint64_t submitted_before = submit_count_.load();
  auto it = in_flight_.find(request.name);
  if (it != in_flight_.end() && !name_is_free(*it->second, submitted_before))
    throw InvalidArgument(std::string(op_type_name(request.op)) + " '" + request.name +
                          "': this rank already has an op of that name in flight on process set " +
                          std::to_string(process_set_id_) +
                          "; names of concurrent ops must be unique (wait for the first one)");
  if (in_flight_.size() >= sweep_in_flight_at_) {
    std::erase_if(in_flight_, [&](const auto& entry) { return name_is_free(*entry.second, submitted_before); });
    sweep_in_flight_at_ = std::max<size_t>(64, 2 * in_flight_.size());
  }
  auto record = std::make_shared<WorkRecord>(submit_count_);
  work->set_record(record);
  in_flight_[request.name] = std::move(record);
  submit_count_.fetch_add(1);
}

void Submitter::broke(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    broken_ = std::move(error);
  }
  connected_cv_.notify_all();
}

void Submitter::wait_connected() {
  std::unique_lock<std::mutex> lock(mutex_);
  connected_cv_.wait(lock, [this] { return connected_ || broken_; });
  if (!connected_ && broken_) std::rethrow_exception(broken_);
}

std::string Submitter::stop_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_reason_;
}

bool Submitter::joined() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return joined_;
}

// Standing in for the others' unnamed op counts as this member's own, so
// that its later unnamed ops keep the names the others give theirs.
void Submitter::stood_in(OpType op, const std::string& name) {
  const std::string unnamed = std::string(op_type_name(op)) + ".noname.";
  if (name.compare(0, unnamed.size(), unnamed) != 0) return;
  const int64_t number = std::strtoll(name.c_str() + unnamed.size(), nullptr, 10);
  std::lock_guard<std::mutex> lock(mutex_);
  noname_counters_[op] = std::max(noname_counters_[op], number);
}

void Submitter::join_finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  joined_ = false;
}

}  // namespace hora
