// Executor: runs a process set's log (control/agreement.h) on its data plane,
// and is the one place that decides who runs an op.
//
// Who runs an op. An op the agreement decides without the coordinator (a
// cached op; admit() finds its slot) runs, in the log's order, on whichever
// thread holds the executor role when the log reaches it: the caller's, when
// it waits for the op at once (drive(), from Work::wait: a repeated op costs
// no thread hand-off), else the engine thread's, which watches the log before
// the op can appear there (a caller's later wait() may still take over).
// Every other op is negotiated through the coordinator, and the engine thread
// runs it when the log reaches the response.
//
// Threads: admit() and enter() from submitting threads (admit() under the
// Submitter's lock), drive() from a waiting caller, deliver() and run_log()
// from the engine thread, give_up()/fail_running() from the engine thread or
// stop(). Running entries holds the executor role (a mutex) and blocks for
// their collectives. Owns the op being run, the responses not yet reached in
// the log and the mirror of the cached requests that submitters look up.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "control/agreement.h"
#include "coordinator/response_cache.h"
#include "coordinator/tensor_queue.h"
#include "coordinator/wire.h"
#include "runtime/engine_options.h"
#include "runtime/op_runner.h"
#include "runtime/set_links.h"

namespace hora {

// What the executor needs to know about this member's join (the Submitter,
// which refuses ops while it has joined, keeps it).
class JoinLedger {
 public:
  virtual ~JoinLedger() = default;
  virtual bool joined() const = 0;
  // This joined member stood in for `name`: its own later unnamed ops of
  // `op` must keep the numbering the others use.
  virtual void stood_in(OpType op, const std::string& name) = 0;
  virtual void join_finished() = 0;
};

class Executor {
 public:
  using Clock = std::chrono::steady_clock;

  // `wake_engine`: makes the engine thread look at the log (any thread).
  // `look`: a driver waiting for an entry the control plane brings runs the
  // engine's loop on its own thread, when it can, for up to the given time
  // or until the predicate holds; returns whether it did (ProgressEngine::
  // look). Null: drivers only wait.
  using Look = std::function<bool(const std::function<bool()>& found, std::chrono::nanoseconds spin)>;
  Executor(const EngineOptions& options, TensorQueue& queue, JoinLedger& joins, telemetry::SetTelemetry& telemetry,
           const std::atomic<bool>& stopping, std::function<void()> wake_engine, Look look = nullptr);

  // Engine thread, under the Submitter's lock, once the set is connected.
  // `cache` names the responses' slots; a member's `member_cache` is filled
  // with the ops its responses cache (null on the coordinator).
  void attach(SetLinks& links, const ResponseCache& cache, ResponseCache* member_cache);

  // Submitting thread, under the Submitter's lock: when `entry` is a cached
  // op the agreement decides, marks it so, lets its Work be driven by
  // `driver` and returns its slot.
  std::optional<uint32_t> admit(TensorEntry& entry, const std::weak_ptr<WorkDriver>& driver);
  // Submitting thread, once the entry is queued: submits `slot` to the
  // agreement; the engine thread watches the log unless `caller_waits`.
  // False where the agreement diverted the op to the coordinator.
  bool enter(uint32_t slot, bool caller_waits, std::vector<uint8_t> carried = {});
  // An admitted op's input where the agreement carries it with the
  // submission (a small allreduce that needs no exchange of its own), else
  // nothing.
  std::vector<uint8_t> carried_input(const TensorEntry& entry);
  // A waiting caller runs the log until `work` is done or the next entry is
  // the engine thread's.
  void drive(const Work& work);

  // Engine thread: responses of the coordinator, in order, for the log.
  void deliver(std::vector<Response> responses);
  // Engine thread: runs what the log holds, unless a driver does; a
  // driver's failure becomes the set's (rethrown). Not from a driver's
  // look (it holds the executor role).
  void run_log();

  // The set is failing: drivers give up their role.
  void give_up();
  // A member left the set cleanly, having run the log's entries: drivers
  // and then the calling thread (the engine thread has stopped) run the
  // entries in this member's log, before the set fails what is left.
  void finish_agreed();
  // Fails the op being run (its collective threw, or the set stopped).
  void fail_running(std::exception_ptr error);
  void wake_drivers();
  Clock::time_point last_run() const { return runner_.last_run(); }
  // Log entries run so far (any thread).
  uint64_t entries_run() const { return entries_run_.load(std::memory_order_relaxed); }

 private:
  control::Agreement& agreement() { return links_->agreement(); }
  bool run_entry(const control::Agreement::Entry& entry, bool engine);
  void run_cached(const control::Agreement::Entry& entry);
  void execute(Response response);
  TensorEntry stand_in(const Response& response, size_t index);
  void finish_join(const Response& response);
  void took_part(const Response& response, size_t index);
  void remember_cached(const Response& response);
  void update_engine_watch();

  const EngineOptions& options_;
  TensorQueue& queue_;
  JoinLedger& joins_;
  telemetry::SetTelemetry& telemetry_;
  const std::atomic<bool>& stopping_;
  const std::function<void()> wake_engine_;
  const Look look_;
  OpRunner runner_;
  // Set once by attach(), before any op can be admitted.
  SetLinks* links_ = nullptr;
  const ResponseCache* cache_ = nullptr;
  ResponseCache* member_cache_ = nullptr;

  std::mutex role_;  // held while running the log (engine thread or a driver)
  // Guarded by role_.
  uint64_t next_entry_ = 0;
  std::atomic<uint64_t> entries_run_{0};  // next_entry_, for entries_run()
  std::vector<TensorEntry> running_;       // the op being run
  std::exception_ptr driver_failure_;      // a driver's, for the engine thread
  std::deque<Response> responses_;         // engine thread: agreed, not yet reached in the log
  std::atomic<int64_t> agreed_pending_{0};  // agreed ops submitted here and not run yet
  std::atomic<int> drivers_{0};             // callers inside drive()
  std::atomic<bool> failing_{false};        // drivers give up their role
  std::atomic<bool> finish_agreed_{false};  // after the entries in the log
  // The cached requests the agreement decides, by name, for submitters:
  // the response cache's first rows() slots, in the order of the responses.
  std::mutex cached_mutex_;
  std::unordered_map<std::string, uint32_t> slot_by_name_;
  std::vector<Request> cached_requests_;
};

}  // namespace hora
