#include "coordinator/stall_inspector.h"

#include <algorithm>
#include <map>

#include "hora/process_set.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxNamesPerRank = 8;

std::string seconds_text(milliseconds duration) {
  const long long ms = duration.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + " s";
}

std::string quoted_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kMaxNamesPerRank; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > kMaxNamesPerRank) out += " and " + std::to_string(names.size() - kMaxNamesPerRank) + " more";
  return out;
}

}  // namespace

StallInspector::StallInspector(int32_t process_set_id, std::vector<int> global_ranks, StallOptions options)
    : process_set_id_(process_set_id), global_ranks_(std::move(global_ranks)), options_(options) {}

void StallInspector::submitted(const std::string& name, Clock::time_point now) { first_seen_.try_emplace(name, now); }

void StallInspector::finished(const std::string& name) { first_seen_.erase(name); }

milliseconds StallInspector::failure_time() const {
  const milliseconds shutdown = options_.shutdown_time, timeout = options_.op_timeout;
  if (shutdown.count() <= 0) return std::max(timeout, milliseconds{0});
  if (timeout.count() <= 0) return shutdown;
  return std::min(shutdown, timeout);
}

milliseconds StallInspector::inspection_interval() const {
  milliseconds shortest{0};
  for (milliseconds limit : {options_.warning_time, failure_time()})
    if (limit.count() > 0 && (shortest.count() == 0 || limit < shortest)) shortest = limit;
  if (shortest.count() == 0) return shortest;
  return std::clamp(shortest / 4, milliseconds{10}, milliseconds{1000});
}

StallReport StallInspector::inspect(Clock::time_point now, const std::function<std::vector<PendingOp>()>& pending) {
  StallReport report;
  if (first_seen_.empty()) return report;
  Clock::time_point oldest = now;
  for (const auto& [name, since] : first_seen_) oldest = std::min(oldest, since);
  const auto age = std::chrono::duration_cast<milliseconds>(now - oldest);
  const milliseconds fail_after = failure_time();
  const bool expired = fail_after.count() > 0 && age >= fail_after;
  const milliseconds warn_after = options_.warning_time;
  const bool warn = warn_after.count() > 0 && age >= warn_after &&
                    (!last_warning_ || now - *last_warning_ >= warn_after);
  if (!expired && !warn) return report;

  const std::vector<PendingOp> ops = pending();
  if (expired) {
    std::vector<Waiting> over = older_than(fail_after, now, ops);
    const bool by_shutdown_time = fail_after == options_.shutdown_time;
    if (!over.empty()) report.failure = failure(over, by_shutdown_time);
  }
  if (warn && !report.failure) {
    std::vector<Waiting> stalled = older_than(warn_after, now, ops);
    if (!stalled.empty()) {
      report.warning = warning(stalled);
      last_warning_ = now;
    }
  }
  return report;
}

std::vector<StallInspector::Waiting> StallInspector::older_than(milliseconds age, Clock::time_point now,
                                                                const std::vector<PendingOp>& pending) const {
  std::vector<Waiting> out;
  for (const PendingOp& op : pending) {
    auto it = first_seen_.find(op.name);
    if (it == first_seen_.end()) continue;
    const auto waited = std::chrono::duration_cast<milliseconds>(now - it->second);
    if (waited >= age) out.push_back({op, waited});
  }
  std::sort(out.begin(), out.end(), [](const Waiting& a, const Waiting& b) { return a.age > b.age; });
  return out;
}

std::string StallInspector::warning(const std::vector<Waiting>& stalled) const {
  // Group by the rank that has not submitted: that is what a user hunts for.
  std::map<int, std::vector<std::string>> by_rank;
  for (const Waiting& w : stalled)
    for (int rank : w.op.missing) by_rank[rank].push_back(w.op.name);
  std::string text = "process set " + std::to_string(process_set_id_) + " " + ranks_string(global_ranks_) + ": " +
                     std::to_string(stalled.size()) + " op(s) have waited more than " +
                     seconds_text(options_.warning_time) +
                     " for ranks that have not submitted them (the longest for " + seconds_text(stalled.front().age) +
                     "). Those ranks may have crashed or hung, or run different code.";
  for (const auto& [rank, names] : by_rank)
    text += "\n  global rank " + std::to_string(rank) + " has not submitted " + quoted_names(names);
  return text;
}

StallFailure StallInspector::failure(const std::vector<Waiting>& expired, bool by_shutdown_time) const {
  StallFailure out;
  std::vector<std::string> names;
  for (const Waiting& w : expired) {
    names.push_back(w.op.name);
    out.missing.insert(out.missing.end(), w.op.missing.begin(), w.op.missing.end());
  }
  std::sort(out.missing.begin(), out.missing.end());
  out.missing.erase(std::unique(out.missing.begin(), out.missing.end()), out.missing.end());
  const milliseconds limit = by_shutdown_time ? options_.shutdown_time : options_.op_timeout;
  out.reason = "global rank(s) " + ranks_string(out.missing) + " did not submit " + quoted_names(names) +
               " within " + seconds_text(limit) + " (" +
               (by_shutdown_time ? "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" : "HORA_OP_TIMEOUT_SECONDS") + ")";
  return out;
}

}  // namespace hora
