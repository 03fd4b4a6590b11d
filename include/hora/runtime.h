// Runtime: hora's state in one process — the world, its process sets and one
// progress engine per live set. The bindings hold exactly one; C++ tests may
// run several in one process (ranks as threads over the local backend).
//
// Thread-safe: any thread may enqueue ops or add and remove sets. The
// constructor blocks until the world set (id 0) and the initial sets (ids
// 1..k, members only) are connected.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hora/metrics.h"
#include "hora/process_set.h"
#include "hora/runtime_config.h"
#include "hora/store.h"
#include "hora/tensor_view.h"
#include "hora/types.h"
#include "hora/work.h"

namespace hora {

class BackendFactory;
class TransportPlanner;
class ProgressEngine;
class ProgressPool;
struct JobTransport;
namespace telemetry {
class Timeline;
}

// One op as a front end submits it.
struct OpArgs {
  OpType op = OpType::kAllreduce;
  std::string name;  // empty: "<op>.noname.<n>"
  TensorView input;
  TensorView output;  // allreduce, broadcast, reducescatter: caller-allocated
  ReduceOp reduce_op = ReduceOp::kSum;
  int root = 0;  // broadcast: global rank
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> splits;  // alltoall: empty means even
  // The caller waits for the op right away: where the set has a fast lane
  // it runs the op on its own thread, and the engine thread is not woken.
  bool caller_waits = false;
};

class Runtime {
 public:
  // The transport the config selects: Gloo with the launcher's store (a
  // single process needs neither), or MPI with a store that rank 0 serves.
  Runtime(RuntimeConfig config, const std::vector<std::vector<int>>& initial_sets);
  // Any transport and store (tests).
  Runtime(RuntimeConfig config, std::shared_ptr<Store> store, std::unique_ptr<TransportPlanner> planner,
          const std::vector<std::vector<int>>& initial_sets);
  // Every set on one transport, without shared memory (tests).
  Runtime(RuntimeConfig config, std::shared_ptr<Store> store, std::unique_ptr<BackendFactory> network,
          const std::vector<std::vector<int>>& initial_sets);
  ~Runtime();

  const RuntimeConfig& config() const { return config_; }
  int rank() const { return config_.rank; }
  int size() const { return config_.size; }

  // Registers a set over `ranks`; only its members block (until the lowest
  // member has called it). A non-member gets the set back at once with id -1
  // and its generation; process_set_id(ranks, generation) reads the id later.
  // Ids are computed by the set's lowest member (see
  // src/process_set/membership.h): the same on every run, never reused.
  // `origin` kFirstUse: a member registers a set on its first op instead.
  ProcessSet add_process_set(std::vector<int> ranks, SetOrigin origin = SetOrigin::kAdded);
  // The id of the `generation`-th set over `ranks` that the members agreed
  // on, for a non-member that added it too; blocks until the set's lowest
  // member has published it (Timeout after config().timeout).
  int32_t process_set_id(const std::vector<int>& ranks, int generation) const;
  // Members: waits until every member has called it, then stops the set.
  // False for the global set, a non-member, or an id not registered here.
  bool remove_process_set(int32_t id);
  // Throws InvalidArgument for a removed or unknown id.
  ProcessSet process_set(int32_t id) const;
  std::vector<ProcessSet> process_sets() const;

  // Validates (InvalidArgument naming what is wrong) and queues an op on set
  // `id`; this rank must be a member. A join (OpType::kJoin, no tensor)
  // completes once every member has joined; its Work's output is one int32,
  // the global rank of the member that joined last. Until then this rank
  // takes part in the other members' allreduces with zeros and may submit
  // nothing else to the set (InvalidArgument).
  std::shared_ptr<Work> enqueue(int32_t id, OpArgs args);

  // The counters of set `id` on this rank; InvalidArgument for a set this
  // rank is not a member of.
  SetMetrics metrics(int32_t id) const;

  // Records the timeline of the sets this rank coordinates (it is the
  // lowest member of) into timeline_file(path, rank()) until
  // stop_timeline(); a running timeline is stopped first. InvalidArgument
  // when the file cannot be created.
  void start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();
  // Rank 0 writes `path` itself, rank r "<stem>.rank<r><ext>" ("t.json":
  // "t.rank2.json"; no extension: "t.rank2").
  static std::string timeline_file(const std::string& path, int rank);

  // Stops every set and the timeline; later calls throw InvalidArgument.
  // Idempotent. `goodbye`: the other members are told that this rank leaves
  // cleanly, so its sets close for them instead of breaking (false: a rank
  // that ends because of an error; they find its connections closed).
  void shutdown(bool goodbye = true);

 private:
  Runtime(JobTransport job, const std::vector<std::vector<int>>& initial_sets);
  // Starts `set`'s engine, which connects it over `set_store` (by default
  // the set's prefix of the job's store), picking up `head_start` (what the
  // planner prepared for it already) if any.
  void create_set(const ProcessSet& set, std::shared_ptr<Store> set_store = nullptr,
                  std::shared_ptr<void> head_start = nullptr);
  std::shared_ptr<ProgressEngine> engine(int32_t id) const;
  std::shared_ptr<Store> set_store_of(int32_t id) const;

  RuntimeConfig config_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<TransportPlanner> planner_;
  std::shared_ptr<ProgressPool> pool_;  // null: a thread per set
  std::shared_ptr<telemetry::Timeline> timeline_;
  int32_t first_dynamic_id_ = 1;
  mutable std::mutex mutex_;
  bool shut_down_ = false;
  std::unique_ptr<class ProcessSetTable> table_;
  std::map<int32_t, std::shared_ptr<ProgressEngine>> engines_;
};

}  // namespace hora
