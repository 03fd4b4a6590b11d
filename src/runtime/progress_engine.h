// ProgressEngine: one process set's engine on one rank, and the parts it is
// made of.
//
// A thread of the set's own first connects the set (the `connect` function,
// which blocks until every member is there), so creating a set never blocks
// the caller and members may create sets in any order. Front-end threads
// submit() ops, also while it connects (Submitter); the engine negotiates
// them with the set's other members over the control plane — set rank 0
// coordinates (CoordinatorLoop), the others follow (MemberLoop) — and the
// Executor runs the agreed ops in the one order the set's Agreement gives
// (control/agreement.h). Every link to the other members goes through
// SetLinks.
//
// Who runs it once connected: the rank's ProgressPool, when the engine has
// one and the set's control plane can be armed (runtime/progress_pool.h:
// threads shared by every set, run when a submission, a control message or
// the next stall inspection needs them; the connecting thread exits), else
// that thread, which sleeps on the control plane in between. Either way
// one thread at a time runs the engine's loop ("the engine thread" below
// and in its parts), no polling cycle, and no other set's engine is ever
// waited for.
//
// Join (Negotiator): a member that submitted a join op takes part in the
// other members' allreduces and barriers with stand-ins (zeros) built from
// the response, until the join response completes its join op with the
// global rank of the member that joined last. Meanwhile submit() refuses
// its ops.
//
// The set is its own fault domain. It breaks when a member's control
// connection closes, a collective fails, or an op waits past the op timeout
// (or the stall shutdown time) for members that never submit it. Then the
// FailureProtocol (on a thread of its own) decides which members are
// missing and every member gets the coordinator's verdict; every pending
// and later op of the set fails with PeerFailure carrying it, which names
// the set, its ranks and the missing ranks (docs/fault_tolerance.md).
// Other sets are not touched.
//
// The fast lane (sets whose members share a host, src/transport/shm/
// fast_lane.h, control/lane_agreement.h): an op found in the response cache
// is agreed in shared memory instead, without the coordinator, and every
// member runs the lane's log — those ops and the coordinator's responses —
// in one order. Whoever holds the executor role runs the log: the engine
// thread, or a caller that waits for its op (drive(), from Work::wait), so a
// repeated op the caller waits for costs no thread hand-off (Executor). The
// coordinator takes back (diverts) what the lane cannot decide alone: a
// mismatching request of a cached name, and every op while a member has
// joined.
//
// stop() (or the destructor) cancels a connection in progress, aborts a
// collective in progress (Backend::abort), fails what is still pending and
// joins. It returns within about BackendFactory::kCancelPoll, except while
// Gloo's own connection step or a control-plane send to a stopped peer with
// a full socket buffer is under way: those are bounded by the set's timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "coordinator/tensor_queue.h"
#include "runtime/coordinator_loop.h"
#include "runtime/engine_options.h"
#include "runtime/executor.h"
#include "runtime/failure_protocol.h"
#include "runtime/member_loop.h"
#include "runtime/progress_pool.h"
#include "runtime/set_links.h"
#include "runtime/submitter.h"
#include "telemetry/set_telemetry.h"
#include "transport/backend.h"

namespace hora {

class ProgressEngine final : public WorkDriver,
                             public ProgressPool::Client,
                             public std::enable_shared_from_this<ProgressEngine> {
 public:
  using Clock = std::chrono::steady_clock;
  // Connects the set; gives up (throwing) once `cancelled` is set.
  using Connect = std::function<SetTransports(const std::atomic<bool>& cancelled)>;

  // `pool`: the rank's shared threads (null: the set keeps a thread).
  ProgressEngine(EngineOptions options, Connect connect, std::shared_ptr<ProgressPool> pool = nullptr);
  ~ProgressEngine() override;
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Any thread. An empty request name becomes "<op>.noname.<n>", counted per
  // op type on this set; a join is always named kJoinName. Throws
  // InvalidArgument once stopped, while this member has joined, and when an
  // op of the same name submitted here has not completed yet (the first op
  // and the set are not affected); on a broken set the returned Work has
  // already failed. `caller_waits`: the caller waits for the op at once (it
  // runs it itself where the agreement allows: Executor).
  std::shared_ptr<Work> submit(Request request, TensorView input, TensorView output, bool caller_waits = false);
  // WorkDriver: runs the log on the calling thread until `work` is done or
  // the next entry is the engine thread's.
  void drive(const Work& work) override { executor_.drive(work); }
  // Fails pending ops with InvalidArgument(`reason`) and joins the thread
  // (see the bound above). `goodbye`: this member leaves cleanly; tell the
  // others (the set closes for them instead of breaking). Idempotent.
  void stop(const std::string& reason, bool goodbye = true);
  // Blocks until the set is connected; rethrows a connection failure.
  void wait_connected() { submitter_.wait_connected(); }
  // The set's counters on this rank (any thread).
  telemetry::SetMetrics metrics() const { return telemetry_.metrics(); }

  // The failure protocol's waits (FailureProtocol).
  static std::chrono::milliseconds census_window(std::chrono::milliseconds timeout) {
    return FailureProtocol::census_window(timeout);
  }
  static std::chrono::milliseconds verdict_wait(std::chrono::milliseconds timeout) {
    return FailureProtocol::verdict_wait(timeout);
  }
  static std::chrono::milliseconds coordinator_grace(std::chrono::milliseconds timeout) {
    return FailureProtocol::coordinator_grace(timeout);
  }

 private:
  // ProgressPool::Client (the pool's thread that holds the set).
  std::optional<Clock::time_point> service() override { return serve_once(false); }
  ControlPlane& control() override { return links_->control(); }
  // service(), on the pool's thread or (`driver`) a driver's look, which
  // holds the executor role and does not run the log.
  std::optional<Clock::time_point> serve_once(bool driver);
  // A driver that waits for an entry (Executor::drive) borrows the set from
  // the pool and looks for its control messages itself, as its agreement
  // looks (Agreement::look), until `found()` or for `spin`: the message it
  // waits for then wakes no other thread. False where the set cannot be
  // borrowed now (a pool thread runs it) or `found()` stayed false.
  bool look(const std::function<bool()>& found, std::chrono::nanoseconds spin);
  // One of a driver's looks between the loop's whole runs: the agreement's
  // own work, and what came from the member whose agreement record came
  // last. False where that was no agreement record (handled), a record
  // that asks for the coordinator's loop (a drain), or it failed: the loop
  // runs at once.
  bool look_for_records();

  void run(const Connect& connect);
  bool connect_links(const Connect& connect);
  void serve();
  Clock::time_point step(bool run_log = true);
  void note_requests(const std::vector<Request>& fresh);
  void on_message(const ControlMessage& message);
  void conclude_failure();
  void dispatch(Clock::time_point now);
  Clock::time_point inspect(Clock::time_point now);
  std::optional<SetFailure>& failure();
  void wake();
  void say_goodbye();
  void record_failure(const std::exception& e);
  void fail_everything(std::exception_ptr error);

  const EngineOptions options_;
  std::atomic<bool> stopping_{false};  // stop() was called; cancels a connection in progress
  telemetry::SetTelemetry telemetry_;
  TensorQueue queue_;
  Executor executor_;
  Submitter submitter_;
  // Engine thread only, once connected (links_ also for stop()).
  std::unique_ptr<SetLinks> links_;
  std::atomic<SetLinks*> awake_links_{nullptr};  // links_ once connected, for wake()
  const std::shared_ptr<ProgressPool> pool_;
  std::shared_ptr<ProgressPool::Slot> slot_;   // set by the connecting thread
  std::atomic<ProgressPool::Slot*> awake_slot_{nullptr};  // slot_ once registered, for wake()
  std::optional<CoordinatorLoop> coordinator_;
  std::optional<MemberLoop> member_;
  Clock::time_point next_inspection_{};
  int records_from_ = -1;  // the sender of the last agreement record (engine thread)

  std::thread thread_;          // connects (and runs the set without a pool)
  std::thread failure_thread_;  // the failure protocol, with a pool
};

}  // namespace hora
