// ProgressEngine: one process set's background thread on one rank.
//
// The thread first connects the set (the `connect` function, which blocks
// until every member is there), so creating a set never blocks the caller and
// members may create sets in any order. Front-end threads submit() ops, also
// while it connects; the engine negotiates them with the set's
// other members over the set's ControlPlane (set rank 0 coordinates)
// and runs the agreed collectives in the agreed order. It sleeps in the
// ControlPlane until local work or a control message arrives, or the next
// stall inspection is due (at most a second): no polling cycle, and no other
// set's engine is ever waited for.
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
// coordinator decides which members are missing — those whose connection
// closed or who did not submit, or, when that is not known, those that do
// not answer a probe within a short census window — and sends every member
// it still reaches the same verdict. Every pending and later op of the set
// fails with PeerFailure carrying that verdict, which names the set, its
// ranks and the missing ranks (docs/fault_tolerance.md). Other sets are not
// touched. The coordinator alone prints stall warnings. A member whose
// coordinator decides nothing on its ops for the op timeout plus a short
// grace reports that to the coordinator, which answers with its verdict (or
// a probe, then the verdict); one that does not answer within the grace
// (stopped, hung) is named missing.
//
// The fast lane (sets whose members share a host, src/transport/shm/
// fast_lane.h): an op found in the response cache is agreed in shared
// memory instead, without the coordinator, and every member runs the
// lane's log — those ops and the coordinator's responses — in one order.
// Whoever holds the executor role runs the log: the engine thread, or a
// caller that waits for its op (drive(), from Work::wait), so a repeated op
// the caller waits for costs no thread hand-off. The coordinator takes back
// (diverts) what the lane cannot decide alone: a mismatching request of a
// cached name, and every op while a member has joined.
//
// stop() (or the destructor) cancels a connection in progress, aborts a
// collective in progress (Backend::abort), fails what is still pending and
// joins. It returns within about BackendFactory::kCancelPoll, except while
// Gloo's own connection step or a control-plane send to a stopped peer with
// a full socket buffer is under way: those are bounded by the set's timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collectives/collectives.h"
#include "coordinator/negotiator.h"
#include "coordinator/response_cache.h"
#include "coordinator/stall_inspector.h"
#include "coordinator/tensor_queue.h"
#include "coordinator/wire.h"
#include "planner/transport_planner.h"
#include "telemetry/set_telemetry.h"
#include "transport/backend.h"
#include "transport/shm/fast_lane.h"

namespace hora {

struct EngineOptions {
  int32_t process_set_id = 0;
  std::vector<int> global_ranks;
  int rank = 0;  // this process's rank within the set
  size_t fusion_threshold = 64 << 20;
  size_t cache_capacity = 1024;
  std::chrono::milliseconds timeout{600'000};            // op timeout; 0: none
  std::chrono::milliseconds stall_warning_time{60'000};  // 0: no stall warnings
  std::chrono::milliseconds stall_shutdown_time{0};      // 0: stalls never fail the set
  std::string transport = "local";                       // names the transport's timeline phases
  std::shared_ptr<telemetry::Timeline> timeline;         // null: none
};

class ProgressEngine final : public WorkDriver, public std::enable_shared_from_this<ProgressEngine> {
 public:
  using Clock = std::chrono::steady_clock;
  // Connects the set; gives up (throwing) once `cancelled` is set.
  using Connect = std::function<SetTransports(const std::atomic<bool>& cancelled)>;

  ProgressEngine(EngineOptions options, Connect connect);
  ~ProgressEngine() override;
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Any thread. An empty request name becomes "<op>.noname.<n>", counted per
  // op type on this set; a join is always named kJoinName. Throws
  // InvalidArgument once stopped, while this member has joined, and when an
  // op of the same name submitted here has not completed yet (the first op
  // and the set are not affected); on a broken set the returned Work has
  // already failed. `caller_waits`: the caller waits for the op at once (it
  // runs it itself where the fast lane allows).
  std::shared_ptr<Work> submit(Request request, TensorView input, TensorView output, bool caller_waits = false);
  // WorkDriver: runs the fast lane's log on the calling thread until `work`
  // is done or the next entry is the engine thread's.
  void drive(const Work& work) override;
  // Fails pending ops with InvalidArgument(`reason`) and joins the thread
  // (see the bound above). Idempotent.
  void stop(const std::string& reason);
  // Blocks until the set is connected; rethrows a connection failure.
  void wait_connected();
  // The set's counters on this rank (any thread).
  telemetry::SetMetrics metrics() const { return telemetry_.metrics(); }

  // For a set with op timeout `timeout`: how long the coordinator waits for
  // members to answer its probe; how long a member waits for the
  // coordinator's verdict once the coordinator has answered (or when the
  // member found the failure before it had waited the op timeout); and the
  // grace a member that has waited the op timeout gives the coordinator,
  // first to fail the op itself, then to answer the member's report.
  static std::chrono::milliseconds census_window(std::chrono::milliseconds timeout);
  static std::chrono::milliseconds verdict_wait(std::chrono::milliseconds timeout);
  static std::chrono::milliseconds coordinator_grace(std::chrono::milliseconds timeout);

 private:
  // Why the set broke, as this member first saw it.
  struct SetFailure {
    std::string reason;
    std::vector<int> gone;      // set ranks known to be dead or hung
    bool needs_census = false;  // who is missing is unknown: ask (coordinator) or report (member)
    bool verdict = false;       // members: `reason` is the coordinator's final verdict
    bool waited_out = false;    // members: this member waited the op timeout itself
    bool coordinator_answered = false;  // members: the coordinator has probed this member
  };

  bool coordinator() const { return options_.rank == 0; }
  int size() const { return static_cast<int>(options_.global_ranks.size()); }
  void run(const Connect& connect);
  void serve();
  void step();
  void wake();
  void inspect(Clock::time_point now, std::chrono::milliseconds head_start = std::chrono::milliseconds{0});
  void inspect_coordinator(Clock::time_point now);
  bool ran_nothing_for_op_timeout(Clock::time_point now) const;
  void negotiate_local(std::vector<Request> fresh);
  void on_message(const ControlMessage& message);
  void on_member_message(int from, const std::vector<uint8_t>& bytes);
  void on_closed(int from);
  void on_failure_message(int from, const FailureMessage& message);
  void dispatch_ready();
  void execute(Response response);
  TensorEntry stand_in(const Response& response, size_t index);
  void zero_stand_ins(std::vector<TensorEntry>& entries);
  void finish_join(const Response& response);
  void run_op(const Response& response, std::vector<TensorEntry>& entries);
  void run_collective(const Response& response, std::vector<TensorEntry>& entries, telemetry::OpTimes& times);
  void note_agreed(const std::vector<Response>& ready);
  const ResponseCache& cache() const { return coordinator() ? negotiator_->cache() : member_cache_; }
  void fail_everything(std::exception_ptr error);

  // The fast lane (progress_engine_lane.cc).
  int32_t lane_slot(const Request& request);
  void lane_submit(uint32_t slot, bool caller_waits);
  void run_lane();
  bool run_lane_entry(const shm::FastLane::Entry& entry, bool engine);
  void run_cached(uint32_t slot);
  void remember_cached(const Response& response);
  void dispatch_through_lane(std::vector<Response> ready);
  void divert(uint32_t slot);
  void divert_for(const Request& request);
  void divert_all();
  void release(uint32_t slot);
  void drain_diverted();
  void update_diversions(const std::vector<Response>& dispatched);
  void inspect_lane(Clock::time_point now);
  std::vector<PendingOp> lane_pending() const;
  void wake_drivers();
  void update_engine_watch();
  // Registers `request`'s name for `work`; InvalidArgument (naming the op and
  // the set) when an op of that name submitted here has not completed.
  void claim_name(const Request& request, const std::shared_ptr<Work>& work);

  // The failure protocol (progress_engine_failure.cc); each returns the
  // message every pending and later op fails with.
  std::string conclude(SetFailure failure);
  void census(const std::string& reason, std::vector<bool>& gone);
  std::string await_verdict(SetFailure failure);
  std::optional<std::string> receive_verdict(const SetFailure& failure, std::string& missed);
  std::string broken_message(const std::vector<int>& missing_global, const std::string& reason) const;
  std::vector<int> set_ranks_of(const std::vector<int>& global_ranks) const;
  bool send_quietly(int to, const std::vector<uint8_t>& bytes);

  EngineOptions options_;
  telemetry::SetTelemetry telemetry_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ControlPlane> control_;  // destroyed before backend_
  TensorQueue queue_;
  std::optional<Negotiator> negotiator_;  // set rank 0 only
  std::optional<StallInspector> inspector_;  // set rank 0 only
  ResponseCache member_cache_;
  FusionBuffer fusion_;
  FusionBuffer stand_in_zeros_;  // a joined member's inputs and outputs

  // Engine thread only (until joined).
  std::optional<SetFailure> failure_;  // set when the set breaks; ends serve()
  std::vector<TensorEntry> running_;   // the op being executed
  std::vector<telemetry::RunTensor> run_tensors_;  // executor: running_ as telemetry sees it
  std::vector<bool> closed_;           // coordinator: members whose control connection closed
  std::vector<bool> reported_;         // coordinator: members that reported a failure
  std::chrono::milliseconds inspection_interval_{0};
  Clock::time_point next_inspection_{};

  std::mutex state_mutex_;
  std::condition_variable connected_cv_;
  bool connected_ = false;
  std::map<OpType, int64_t> noname_counters_;
  // Ops submitted here, by name, until their names are free again: a second
  // op of the same name meanwhile is refused (claim_name).
  std::unordered_map<std::string, std::shared_ptr<WorkRecord>> in_flight_;
  std::atomic<uint64_t> submit_count_{0};  // ops submitted here so far
  // When this rank last started or finished running an op on the set
  // (Clock ticks; the engine thread or a driver writes it).
  std::atomic<Clock::rep> last_run_{0};
  size_t sweep_in_flight_at_ = 64;
  bool joined_ = false;  // a join op of this member is pending
  std::string stop_reason_;
  std::exception_ptr broken_;
  std::atomic<bool> stopping_{false};  // also cancels connect()

  // Fast lane. lane_ is set once, before connected_; the rest as noted.
  shm::FastLane* lane_ = nullptr;
  std::mutex lane_slots_mutex_;  // the cached requests, by name, for submitters
  std::unordered_map<std::string, uint32_t> lane_slot_by_name_;
  std::vector<Request> lane_requests_;
  std::mutex executor_;       // held while running the log (engine or a driver)
  uint64_t next_entry_ = 0;   // guarded by executor_
  std::deque<Response> responses_;      // engine thread: agreed, not yet reached in the log
  std::deque<Response> undispatched_;   // coordinator: agreed, waiting for room in the log
  std::atomic<int64_t> lane_pending_{0};  // lane ops submitted here and not run yet
  std::atomic<int> drivers_{0};           // callers inside drive()
  std::atomic<bool> failing_{false};      // drivers give up their role
  std::exception_ptr driver_failure_;     // guarded by state_mutex_
  // Coordinator: diverted rows (all_diverted_: every row, while a member
  // has joined, up to diverted_upto_) and the lane ops waiting for members.
  std::set<uint32_t> diverted_;
  bool all_diverted_ = false;
  struct LaneWait {
    uint32_t completions = 0;
    std::vector<int> submitted;
  };
  std::unordered_map<uint32_t, LaneWait> lane_waits_;

  std::thread thread_;
};

}  // namespace hora
