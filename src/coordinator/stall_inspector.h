// StallInspector: the coordinator's clock on ops that some members of its
// process set have submitted and others have not.
//
// The engine tells it when an op is first submitted by any member and when
// the op leaves negotiation; inspect() then says whether to warn (ops
// waiting longer than the stall warning time, naming the tensors and the
// ranks that have not submitted them; repeated once per warning period
// while they wait) and whether the set must fail (an op waiting longer than
// the stall shutdown time or the op timeout, whichever is shorter).
//
// Members that wait on different ops have diverged: every rank an op waits
// for is itself waiting on another op, so none can proceed. That is said
// as such, naming each rank's op, and warned about sooner (the divergence
// time) once two inspections in a row have seen it; a rank waiting on
// another op is never called missing. Diverged members that stay so with
// nothing submitted or finished meanwhile run different code: their ops
// fail after the divergence timeout instead of the op timeout, and only
// those ops (StallFailure::diverged), for every member is alive.
//
// An op that waits for ranks that are not waiting on anything (still
// computing, or stuck) gets one notice at the divergence time, naming them,
// before the stall warning. It reads the clock only through its
// arguments: no threads, no I/O. One engine thread calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/negotiator.h"

namespace hora {

struct StallOptions {
  std::chrono::milliseconds warning_time{60'000};  // HOROVOD_STALL_CHECK_TIME_SECONDS; 0: never warn
  std::chrono::milliseconds shutdown_time{0};      // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS; 0: never
  std::chrono::milliseconds op_timeout{600'000};   // HORA_OP_TIMEOUT_SECONDS; 0: never
  // Diverged members are warned about after this, or after the warning
  // time if that is shorter (no warning when warnings are off).
  std::chrono::milliseconds divergence_time{10'000};
  // Diverged members fail this long after the divergence was first seen
  // while nothing was submitted or finished (HORA_DIVERGENCE_TIMEOUT_SECONDS);
  // 0: only the op timeout fails them.
  std::chrono::milliseconds divergence_timeout{60'000};
};

// Why stalled ops fail: the global ranks that did not submit the
// expired ops and wait on nothing else (none when the members diverged),
// and a sentence naming the ops, what each rank waits on, and the limit.
struct StallFailure {
  std::vector<int> missing;
  std::string reason;
  bool diverged = false;  // every rank waits on an op: the ops fail, not the set
};

struct StallReport {
  std::string warning;  // non-empty: print it (several lines, no trailing newline)
  std::optional<StallFailure> failure;
};

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;

  StallInspector(int32_t process_set_id, std::vector<int> global_ranks, StallOptions options);

  // The first call for `name` starts its clock; later ones do nothing.
  // Any call counts as activity on the set (a diverged set with activity
  // is not failed early).
  void submitted(const std::string& name, Clock::time_point now);
  // When the clock of `name` started, if it runs.
  std::optional<Clock::time_point> since(const std::string& name) const;
  // `name` left negotiation (it is ready, or failed validation); counts as
  // activity as of the next inspection.
  void finished(const std::string& name);

  // Calls `pending` (Negotiator::pending) only when some op is old enough
  // to report.
  StallReport inspect(Clock::time_point now, const std::function<std::vector<PendingOp>()>& pending);

  // How often inspect() needs to run to keep its promises to within a
  // quarter of the shortest limit (at most once a second); zero when every
  // limit is off.
  std::chrono::milliseconds inspection_interval() const;
  // The age at which a waiting op first counts in a report: the soonest of
  // the warning time, the divergence watch and the failure time (zero:
  // never).
  std::chrono::milliseconds report_time() const;

 private:
  struct Waiting {
    PendingOp op;
    std::chrono::milliseconds age;
  };
  std::vector<Waiting> older_than(std::chrono::milliseconds age, Clock::time_point now,
                                  const std::vector<PendingOp>& pending) const;
  std::string warning(const std::vector<Waiting>& stalled, const std::vector<PendingOp>& pending) const;
  std::string divergence_warning(const std::vector<PendingOp>& pending, std::chrono::milliseconds age) const;
  std::string waiting_notice(const std::vector<Waiting>& waiting) const;
  StallFailure divergence_failure(const std::vector<PendingOp>& pending, std::chrono::milliseconds still) const;
  StallFailure failure(const std::vector<Waiting>& expired, const std::vector<PendingOp>& pending,
                       bool by_shutdown_time) const;
  // The divergence time as the warning time bounds it (zero: off).
  std::chrono::milliseconds divergence_warning_time() const;
  // When inspections start looking for divergence: the sooner of the
  // divergence warning time and the divergence timeout (zero: never).
  std::chrono::milliseconds divergence_watch_time() const;
  // The shorter of the shutdown time and the op timeout (zero: neither).
  std::chrono::milliseconds failure_time() const;

  const int32_t process_set_id_;
  const std::vector<int> global_ranks_;
  const StallOptions options_;
  std::unordered_map<std::string, Clock::time_point> first_seen_;
  std::optional<Clock::time_point> last_warning_;
  std::optional<Clock::time_point> diverged_since_;  // the first inspection of an unbroken run that saw it
  std::optional<Clock::time_point> last_activity_;   // the last submission or finish seen
  bool finished_since_inspection_ = false;
  bool noticed_ = false;  // the waiting notice of the present stall was given
};

}  // namespace hora
