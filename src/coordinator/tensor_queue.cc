#include "coordinator/tensor_queue.h"

#include "hora/errors.h"

namespace hora {

void TensorQueue::push(TensorEntry entry, bool negotiate) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string name = entry.request.name;
  if (pending_.count(name))
    throw InvalidArgument("an op named '" + name + "' is already pending on this process set; " +
                          "names of concurrent ops must be unique");
  pending_.emplace(name, std::move(entry));
  if (negotiate) fresh_.push_back(name);
}

std::vector<Request> TensorQueue::take_new() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Request> out;
  out.reserve(fresh_.size());
  for (const std::string& name : fresh_) out.push_back(pending_.at(name).request);
  fresh_.clear();
  return out;
}

TensorEntry TensorQueue::take(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pending_.find(name);
  if (it == pending_.end()) throw Internal("the coordinator scheduled '" + name + "', which this rank never submitted");
  TensorEntry entry = std::move(it->second);
  pending_.erase(it);
  return entry;
}

std::optional<TensorEntry> TensorQueue::try_take(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pending_.find(name);
  if (it == pending_.end()) return std::nullopt;
  TensorEntry entry = std::move(it->second);
  pending_.erase(it);
  return entry;
}

std::vector<TensorEntry> TensorQueue::take_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TensorEntry> out;
  for (auto& [name, entry] : pending_) out.push_back(std::move(entry));
  pending_.clear();
  fresh_.clear();
  return out;
}

bool TensorQueue::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.empty();
}

std::optional<std::chrono::steady_clock::time_point> TensorQueue::oldest_submission() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<std::chrono::steady_clock::time_point> oldest;
  for (const auto& [name, entry] : pending_)
    if (entry.request.op != OpType::kJoin && (!oldest || entry.submitted < *oldest)) oldest = entry.submitted;
  return oldest;
}

}  // namespace hora
