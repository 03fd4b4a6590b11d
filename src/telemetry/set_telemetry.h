// SetTelemetry: what one process set's engine on this rank tells about its
// work — the set's counters (SetMetrics, on every member) and, on the set's
// coordinator while a timeline runs, the set's lane of the timeline.
//
// The coordinator sees every member's submission, so it alone knows how
// long an op waited for its slowest member and which member that was; it
// records a NEGOTIATE_<OP> span per op with a tick per member as it
// submits. Every executor records the op itself: <OP> with its phases
// (QUEUE, MEMCPY_IN_FUSION_BUFFER, the transport's <NAME>_<OP>,
// MEMCPY_OUT_FUSION_BUFFER) as nested spans on each tensor's row, named
// as Horovod's timeline names it ("allreduce.grad").
//
// Threads: submitted()/agreed() run on the engine thread; executed() on
// whichever thread holds the executor role (one at a time); metrics() on
// any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hora/metrics.h"
#include "hora/types.h"
#include "telemetry/timeline.h"

namespace hora::telemetry {

using Clock = std::chrono::steady_clock;

using SetMetrics = hora::SetMetrics;

// When the phases of one run op ended (zero: the op has no such phase).
struct OpTimes {
  Clock::time_point start{};
  Clock::time_point packed{};       // fusion: inputs copied in
  Clock::time_point transported{};  // fusion: reduced, before the copy out
  Clock::time_point end{};
};

// One executed tensor as telemetry sees it.
struct RunTensor {
  const std::string* name = nullptr;  // the op's name, owned by the caller
  size_t bytes = 0;
  Clock::time_point submitted{};
  bool own = true;   // false: a joined member's stand-in
  bool lane = false; // agreed in the fast lane
};

class SetTelemetry {
 public:
  SetTelemetry(int32_t set_id, std::vector<int> global_ranks, int set_rank, std::shared_ptr<Timeline> timeline);
  ~SetTelemetry();

  // The set is connected over `transport` ("shm", "tcp", "gloo", ...: names the
  // transport's phases); on the coordinator its lane appears in the
  // timeline. Before any op runs.
  void connected(const std::string& transport);

  // Coordinator: `set_rank` submitted `name` (a cached slot or a request).
  void submitted(const std::string& name, OpType op, int set_rank, Clock::time_point now);
  // Coordinator: `name` left negotiation.
  void agreed(const std::string& name, bool fused_with_others, Clock::time_point now);
  // Any member: a cacheable op was submitted; `hit`: the cache knew it;
  // `fast_path`: the agreement took the hit where it was submitted (the
  // fast lane, the agreement between hosts), not diverting it to the
  // coordinator.
  void cache_lookup(bool hit, bool fast_path = false);
  void executed(OpType op, const std::vector<RunTensor>& tensors, const OpTimes& times);
  void failed(OpType op, const std::vector<std::string>& names, const std::string& error);
  void stall(const std::string& warning);
  void broken(const std::string& reason);
  // The set closed cleanly (a member left it): a SET_CLOSED event; not broken.
  void closed(const std::string& reason);
  // A batch of work begins (HOROVOD_TIMELINE_MARK_CYCLES).
  void cycle();

  SetMetrics metrics() const;

 private:
  bool timeline_on() const { return coordinator_ && timeline_ && timeline_->active(); }
  void instant(const std::string& row, const std::string& name, Clock::time_point at, std::string args = {});
  void span(const std::string& row, const std::string& name, Clock::time_point from, Clock::time_point to,
            std::string args = {});

  const int32_t set_id_;
  const std::vector<int> global_ranks_;
  const int set_rank_;
  std::string transport_ = "LOCAL";  // upper case, for phase names; set before any op runs
  const std::shared_ptr<Timeline> timeline_;
  const bool coordinator_;

  struct Negotiation {
    OpType op = OpType::kAllreduce;
    Clock::time_point first{}, last{};
    int last_rank = -1;
    int submitters = 0;
  };
  std::unordered_map<std::string, Negotiation> negotiating_;   // engine thread
  std::unordered_map<std::string, Clock::time_point> agreed_;  // guarded by mutex_

  // Counted per op kind in arrays, so that an op costs no string or map
  // work; metrics() names the kinds.
  mutable std::mutex mutex_;
  SetMetrics metrics_;  // everything but ops and bytes
  std::array<int64_t, kNumOpTypes> ops_{};
  std::array<int64_t, kNumOpTypes> bytes_{};
};

// "ALLREDUCE", "NEGOTIATE_ALLREDUCE": the names Horovod's timeline uses.
std::string phase_name(OpType op);

}  // namespace hora::telemetry
