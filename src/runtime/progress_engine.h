// ProgressEngine: one process set's background thread on one rank.
//
// The thread first connects the set (the `connect` function, which blocks
// until every member is there), so creating a set never blocks the caller and
// members may create sets in any order. Front-end threads submit() ops, also
// while it connects; the engine negotiates them with the set's
// other members over the Backend's control plane (set rank 0 coordinates)
// and runs the agreed collectives in the agreed order. It sleeps in the
// Backend until local work or a control message arrives, or until the next
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
// touched. The coordinator alone prints stall warnings.
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
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
#include "transport/backend.h"

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
};

class ProgressEngine {
 public:
  using Clock = std::chrono::steady_clock;
  // Connects the set; gives up (throwing) once `cancelled` is set.
  using Connect = std::function<std::unique_ptr<Backend>(const std::atomic<bool>& cancelled)>;

  ProgressEngine(EngineOptions options, Connect connect);
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Any thread. An empty request name becomes "<op>.noname.<n>", counted per
  // op type on this set; a join is always named kJoinName. Throws
  // InvalidArgument once stopped, while this member has joined, and when an
  // op of the same name submitted here has not completed yet (the first op
  // and the set are not affected); on a broken set the returned Work has
  // already failed.
  std::shared_ptr<Work> submit(Request request, TensorView input, TensorView output);
  // Fails pending ops with InvalidArgument(`reason`) and joins the thread
  // (see the bound above). Idempotent.
  void stop(const std::string& reason);
  // Blocks until the set is connected; rethrows a connection failure.
  void wait_connected();

  // How long the coordinator waits for members to answer its probe, and
  // how long a member waits for the coordinator's verdict, for a set with
  // op timeout `timeout`.
  static std::chrono::milliseconds census_window(std::chrono::milliseconds timeout);
  static std::chrono::milliseconds verdict_wait(std::chrono::milliseconds timeout);

 private:
  // Why the set broke, as this member first saw it.
  struct SetFailure {
    std::string reason;
    std::vector<int> gone;      // set ranks known to be dead or hung
    bool needs_census = false;  // who is missing is unknown: ask (coordinator) or report (member)
    bool verdict = false;       // members: `reason` is the coordinator's final verdict
  };

  bool coordinator() const { return options_.rank == 0; }
  int size() const { return static_cast<int>(options_.global_ranks.size()); }
  void run(const Connect& connect);
  void serve();
  void step();
  void wake();
  void inspect(Clock::time_point now);
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
  const ResponseCache& cache() const { return coordinator() ? negotiator_->cache() : member_cache_; }
  void fail_everything(std::exception_ptr error);
  // Registers `request`'s name for `work`; InvalidArgument (naming the op and
  // the set) when an op of that name submitted here has not completed.
  void claim_name(const Request& request, const std::shared_ptr<Work>& work);

  // The failure protocol (progress_engine_failure.cc); each returns the
  // message every pending and later op fails with.
  std::string conclude(SetFailure failure);
  void census(const std::string& reason, std::vector<bool>& gone);
  std::string await_verdict(SetFailure failure);
  std::string broken_message(const std::vector<int>& missing_global, const std::string& reason) const;
  std::vector<int> set_ranks_of(const std::vector<int>& global_ranks) const;
  bool send_quietly(int to, const std::vector<uint8_t>& bytes);

  EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  TensorQueue queue_;
  std::optional<Negotiator> negotiator_;  // set rank 0 only
  std::optional<StallInspector> inspector_;  // set rank 0 only
  ResponseCache member_cache_;
  FusionBuffer fusion_;
  FusionBuffer stand_in_zeros_;  // a joined member's inputs and outputs

  // Engine thread only (until joined).
  std::optional<SetFailure> failure_;  // set when the set breaks; ends serve()
  std::vector<TensorEntry> running_;   // the op being executed
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
  size_t sweep_in_flight_at_ = 64;
  bool joined_ = false;  // a join op of this member is pending
  std::string stop_reason_;
  std::exception_ptr broken_;
  std::atomic<bool> stopping_{false};  // also cancels connect()
  std::thread thread_;
};

}  // namespace hora
