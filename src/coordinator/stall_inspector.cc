#include "coordinator/stall_inspector.h"

#include <algorithm>
#include <map>

#include "hora/process_set.h"
#include "util/durations.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxNamesPerRank = 8;

std::string quoted_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kMaxNamesPerRank; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > kMaxNamesPerRank) out += " and " + std::to_string(names.size() - kMaxNamesPerRank) + " more";
  return out;
}

// What each rank waits on: the pending ops it has submitted, by global rank.
std::map<int, std::vector<std::string>> waits_by_rank(const std::vector<PendingOp>& pending) {
  std::map<int, std::vector<std::string>> out;
  for (const PendingOp& op : pending)
    for (int rank : op.submitted) out[rank].push_back(op.description.empty() ? "'" + op.name + "'" : op.description);
  return out;
}

std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxNamesPerRank; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kMaxNamesPerRank) out += " and " + std::to_string(items.size() - kMaxNamesPerRank) + " more";
  return out;
}

// Every rank some op waits for is waiting on another op itself.
bool diverged(const std::vector<PendingOp>& pending) {
  if (pending.empty()) return false;
  const auto waits = waits_by_rank(pending);
  bool anyone_missing = false;
  for (const PendingOp& op : pending)
    for (int rank : op.missing) {
      anyone_missing = true;
      if (!waits.count(rank)) return false;
    }
  return anyone_missing;
}

}  // namespace

StallInspector::StallInspector(int32_t process_set_id, std::vector<int> global_ranks, StallOptions options)
    : process_set_id_(process_set_id), global_ranks_(std::move(global_ranks)), options_(options) {}

void StallInspector::submitted(const std::string& name, Clock::time_point now) {
  first_seen_.try_emplace(name, now);
  last_activity_ = now;
}

void StallInspector::finished(const std::string& name) {
  first_seen_.erase(name);
  finished_since_inspection_ = true;
}

milliseconds StallInspector::failure_time() const {
  const milliseconds shutdown = options_.shutdown_time, timeout = options_.op_timeout;
  if (shutdown.count() <= 0) return std::max(timeout, milliseconds{0});
  if (timeout.count() <= 0) return shutdown;
  return std::min(shutdown, timeout);
}

milliseconds StallInspector::divergence_warning_time() const {
  const milliseconds warn = options_.warning_time, diverge = options_.divergence_time;
  if (warn.count() <= 0) return milliseconds{0};
  return diverge.count() > 0 ? std::min(warn, diverge) : warn;
}

milliseconds StallInspector::divergence_watch_time() const {
  const milliseconds warn = divergence_warning_time(), fail = options_.divergence_timeout;
  if (warn.count() <= 0) return std::max(fail, milliseconds{0});
  return fail.count() > 0 ? std::min(warn, fail) : warn;
}

milliseconds StallInspector::inspection_interval() const {
  milliseconds shortest{0};
  for (milliseconds limit : {divergence_watch_time(), failure_time()})
    if (limit.count() > 0 && (shortest.count() == 0 || limit < shortest)) shortest = limit;
  if (shortest.count() == 0) return shortest;
  return std::clamp(shortest / 4, milliseconds{10}, milliseconds{1000});
}

std::optional<StallInspector::Clock::time_point> StallInspector::since(const std::string& name) const {
  auto it = first_seen_.find(name);
  if (it == first_seen_.end()) return std::nullopt;
  return it->second;
}

milliseconds StallInspector::report_time() const {
  milliseconds soonest{0};
  for (milliseconds limit : {options_.warning_time, divergence_watch_time(), failure_time()})
    if (limit.count() > 0 && (soonest.count() == 0 || limit < soonest)) soonest = limit;
  return soonest;
}

StallReport StallInspector::inspect(Clock::time_point now, const std::function<std::vector<PendingOp>()>& pending) {
  StallReport report;
  if (finished_since_inspection_) {
    finished_since_inspection_ = false;
    last_activity_ = now;
  }
  if (first_seen_.empty()) noticed_ = false;
  Clock::time_point oldest = now;
  for (const auto& [name, since] : first_seen_) oldest = std::min(oldest, since);
  const auto age = std::chrono::duration_cast<milliseconds>(now - oldest);
  const milliseconds fail_after = failure_time();
  const bool expired = fail_after.count() > 0 && age >= fail_after;
  const milliseconds warn_after = options_.warning_time;
  const bool warning_due = !last_warning_ || now - *last_warning_ >= warn_after;
  const bool warn = warn_after.count() > 0 && age >= warn_after && warning_due;
  // Divergence is tracked from an inspection before its warning is due, so
  // that the warning needs two inspections in a row to agree.
  const milliseconds diverge_after = divergence_warning_time();
  const milliseconds watch_after = divergence_watch_time();
  const bool near_divergence = watch_after.count() > 0 && age + inspection_interval() >= watch_after;
  if (first_seen_.empty() || (!expired && !warn && !near_divergence)) {
    diverged_since_.reset();
    return report;
  }

  const std::vector<PendingOp> ops = pending();
  const bool diverged_now = diverged(ops);
  if (!diverged_now) diverged_since_.reset();
  else if (!diverged_since_) diverged_since_ = now;
  if (expired) {
    std::vector<Waiting> over = older_than(fail_after, now, ops);
    const bool by_shutdown_time = fail_after == options_.shutdown_time;
    if (!over.empty()) report.failure = failure(over, ops, by_shutdown_time);
  }
  if (report.failure) return report;
  if (diverged_now && options_.divergence_timeout.count() > 0) {
    // Unchanged since the divergence was first seen (or since the last
    // submission or finish, if later): the members run different code.
    const auto still = std::chrono::duration_cast<milliseconds>(now - std::max(*diverged_since_, *last_activity_));
    if (still >= options_.divergence_timeout) {
      report.failure = divergence_failure(ops, still);
      return report;
    }
  }
  if (diverged_now && diverge_after.count() > 0 && *diverged_since_ < now && age >= diverge_after && warning_due) {
    report.warning = divergence_warning(ops, age);
    last_warning_ = now;
  } else if (warn && !diverged_now) {
    std::vector<Waiting> stalled = older_than(warn_after, now, ops);
    if (!stalled.empty()) {
      report.warning = warning(stalled, ops);
      last_warning_ = now;
      noticed_ = true;
    }
  } else if (!diverged_now && !noticed_ && diverge_after.count() > 0 && diverge_after < warn_after &&
             age >= diverge_after) {
    // Say early, once, whom the set waits for; the stall warning follows.
    std::vector<Waiting> waiting = older_than(diverge_after, now, ops);
    if (!waiting.empty()) {
      report.warning = waiting_notice(waiting);
      noticed_ = true;
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

std::string StallInspector::warning(const std::vector<Waiting>& stalled, const std::vector<PendingOp>& pending) const {
  // Group by the rank that has not submitted: that is what a user hunts for.
  std::map<int, std::vector<std::string>> by_rank;
  for (const Waiting& w : stalled)
    for (int rank : w.op.missing) by_rank[rank].push_back(w.op.name);
  const auto waits = waits_by_rank(pending);
  std::string text = "process set " + std::to_string(process_set_id_) + " " + ranks_string(global_ranks_) + ": " +
                     std::to_string(stalled.size()) + " op(s) have waited more than " +
                     seconds_text(options_.warning_time) +
                     " for ranks that have not submitted them (the longest for " + seconds_text(stalled.front().age) +
                     "). Those ranks may have crashed or hung, or run different code.";
  for (const auto& [rank, names] : by_rank) {
    text += "\n  global rank " + std::to_string(rank) + " has not submitted " + quoted_names(names);
    if (auto it = waits.find(rank); it != waits.end()) text += "; it waits on " + listed(it->second);
  }
  return text;
}

std::string StallInspector::divergence_warning(const std::vector<PendingOp>& pending, milliseconds age) const {
  std::string text = "process set " + std::to_string(process_set_id_) + " " + ranks_string(global_ranks_) +
                     ": the ranks diverged: each waits on an op the others have not submitted (for " +
                     seconds_text(age) + "). They run different code, or call collectives in a different order " +
                     "or under different names.";
  for (const auto& [rank, ops] : waits_by_rank(pending))
    text += "\n  global rank " + std::to_string(rank) + " waits on " + listed(ops);
  return text;
}

std::string StallInspector::waiting_notice(const std::vector<Waiting>& waiting) const {
  std::vector<int> ranks;
  std::vector<std::string> names;
  for (const Waiting& w : waiting) {
    names.push_back(w.op.name);
    ranks.insert(ranks.end(), w.op.missing.begin(), w.op.missing.end());
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return "process set " + std::to_string(process_set_id_) + " " + ranks_string(global_ranks_) + ": " +
         quoted_names(names) + " has waited " + seconds_text(waiting.front().age) + " for global rank(s) " +
         ranks_string(ranks) + ", which have not submitted it (still computing?); a stall warning follows at " +
         seconds_text(options_.warning_time) + " (HOROVOD_STALL_CHECK_TIME_SECONDS)";
}

StallFailure StallInspector::divergence_failure(const std::vector<PendingOp>& pending, milliseconds still) const {
  StallFailure out;
  out.diverged = true;
  out.reason = "the ranks diverged: each waits on an op the others have not submitted, and nothing was submitted "
               "or finished for " + seconds_text(still) + " (HORA_DIVERGENCE_TIMEOUT_SECONDS: " +
               seconds_text(options_.divergence_timeout) + ")";
  for (const auto& [rank, ops] : waits_by_rank(pending))
    out.reason += "; global rank " + std::to_string(rank) + " waits on " + listed(ops);
  return out;
}

StallFailure StallInspector::failure(const std::vector<Waiting>& expired, const std::vector<PendingOp>& pending,
                                     bool by_shutdown_time) const {
  const auto waits = waits_by_rank(pending);
  StallFailure out;
  std::vector<std::string> names;
  std::vector<int> waiting_elsewhere;
  for (const Waiting& w : expired) {
    names.push_back(w.op.name);
    for (int rank : w.op.missing) (waits.count(rank) ? waiting_elsewhere : out.missing).push_back(rank);
  }
  for (std::vector<int>* ranks : {&out.missing, &waiting_elsewhere}) {
    std::sort(ranks->begin(), ranks->end());
    ranks->erase(std::unique(ranks->begin(), ranks->end()), ranks->end());
  }
  const milliseconds limit = by_shutdown_time ? options_.shutdown_time : options_.op_timeout;
  const std::string within = " within " + seconds_text(limit) + " (" +
                             (by_shutdown_time ? "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" : "HORA_OP_TIMEOUT_SECONDS") + ")";
  std::string waiting_text;
  for (int rank : waiting_elsewhere)
    waiting_text += "; global rank " + std::to_string(rank) + " waits on " + listed(waits.at(rank));
  if (out.missing.empty()) {
    out.diverged = true;
    out.reason = "the ranks diverged: each waits on an op the others have not submitted, and none was submitted "
                 "by every member" + within;
    for (const auto& [rank, ops] : waits) out.reason += "; global rank " + std::to_string(rank) + " waits on " + listed(ops);
    return out;
  }
  out.reason = "global rank(s) " + ranks_string(out.missing) + " did not submit " + quoted_names(names) + within;
  if (!waiting_elsewhere.empty()) out.reason += "; also not submitted by ranks waiting on other ops" + waiting_text;
  return out;
}

}  // namespace hora
