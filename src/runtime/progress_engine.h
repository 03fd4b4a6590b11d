// ProgressEngine: one process set's background thread on one rank.
//
// The thread first connects the set (the `connect` function, which blocks
// until every member is there), so creating a set never blocks the caller and
// members may create sets in any order. Front-end threads submit() ops, also
// while it connects; the engine negotiates them with the set's
// other members over the Backend's control plane (set rank 0 coordinates)
// and runs the agreed collectives in the agreed order. It sleeps in the
// Backend until local work or a control message arrives: no polling cycle,
// and no other set's engine is ever waited for. Once a transport error
// breaks the set, every pending and later op fails with that error.
// stop() (or the destructor) fails what is still pending and joins.
#pragma once

#include <atomic>
#include <cstdint>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collectives.h"
#include "coordinator/negotiator.h"
#include "coordinator/response_cache.h"
#include "coordinator/tensor_queue.h"
#include "transport/backend.h"

namespace hora {

struct EngineOptions {
  int32_t process_set_id = 0;
  std::vector<int> global_ranks;
  int rank = 0;  // this process's rank within the set
  size_t fusion_threshold = 64 << 20;
  size_t cache_capacity = 1024;
};

class ProgressEngine {
 public:
  using Connect = std::function<std::unique_ptr<Backend>()>;
  ProgressEngine(EngineOptions options, Connect connect);
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Any thread. An empty request name becomes "<op>.noname.<n>", counted per
  // op type on this set. Throws InvalidArgument once stopped.
  std::shared_ptr<Work> submit(Request request, TensorView input, TensorView output);
  // Fails pending ops with `reason` and joins the thread. Idempotent.
  void stop(const std::string& reason);
  // Blocks until the set is connected; rethrows a connection failure.
  void wait_connected();

 private:
  bool coordinator() const { return options_.rank == 0; }
  void run(const Connect& connect);
  void serve();
  void wake();
  void negotiate_local(std::vector<Request> fresh);
  void on_message(const ControlMessage& message);
  void dispatch_ready();
  void execute(Response response);
  void run_op(const Response& response, std::vector<TensorEntry>& entries);
  const ResponseCache& cache() const { return coordinator() ? negotiator_->cache() : member_cache_; }
  void fail_everything(std::exception_ptr error);

  EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  TensorQueue queue_;
  std::optional<Negotiator> negotiator_;  // set rank 0 only
  ResponseCache member_cache_;
  FusionBuffer fusion_;

  std::mutex state_mutex_;
  std::condition_variable connected_cv_;
  bool connected_ = false;
  std::map<OpType, int64_t> noname_counters_;
  std::string stop_reason_;
  std::exception_ptr broken_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace hora
