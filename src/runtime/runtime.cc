#include "hora/runtime.h"

#include <algorithm>

#include "hora/errors.h"
#include "process_set/membership.h"
#include "process_set/process_set_table.h"
#include "runtime/op_validation.h"
#include "runtime/progress_engine.h"
#include "runtime/set_presence.h"
#include "store/carried_store.h"
#include "planner/transport_planner.h"
#include "telemetry/timeline.h"
#include "transport/registry.h"

namespace hora {
namespace {

// How long members wait for each other before the first warning that one
// has not arrived (bounded by the stall warning time; none when that is off).
constexpr std::chrono::milliseconds kAbsenceWarningTime{30'000};

ProcessSet make_set(int32_t id, std::vector<int> ranks, int my_rank) {
  ProcessSet set{id, std::move(ranks), -1};
  for (size_t i = 0; i < set.ranks.size(); ++i)
    if (set.ranks[i] == my_rank) set.rank = static_cast<int>(i);
  return set;
}

}  // namespace

Runtime::Runtime(RuntimeConfig config, const std::vector<std::vector<int>>& initial_sets)
    : Runtime(open_job_transport(std::move(config)), initial_sets) {}

Runtime::Runtime(JobTransport job, const std::vector<std::vector<int>>& initial_sets)
    : Runtime(job.config, std::move(job.store),
              make_transport_planner(std::move(job.factory), planner_options(job.config)), initial_sets) {}

Runtime::Runtime(RuntimeConfig config, std::shared_ptr<Store> store, std::unique_ptr<BackendFactory> network,
                 const std::vector<std::vector<int>>& initial_sets)
    : Runtime(std::move(config), std::move(store), make_transport_planner(std::move(network)), initial_sets) {}

Runtime::Runtime(RuntimeConfig config, std::shared_ptr<Store> store, std::unique_ptr<TransportPlanner> planner,
                 const std::vector<std::vector<int>>& initial_sets)
    : config_(std::move(config)),
      store_(config_.epoch == 0 ? std::move(store)
                                : make_prefix_store("epoch." + std::to_string(config_.epoch), std::move(store))),
      planner_(std::move(planner)),
      pool_(config_.progress_pool && ProgressPool::supported()
                ? std::make_shared<ProgressPool>(2, 64, host_crowded(config_) ? std::chrono::microseconds(0)
                                                                               : std::chrono::microseconds(100))
                : nullptr),
      timeline_(std::make_shared<telemetry::Timeline>()),
      table_(std::make_unique<ProcessSetTable>()) {
  if (!config_.timeline_path.empty()) start_timeline(config_.timeline_path, config_.timeline_mark_cycles);
  std::vector<ProcessSet> sets;
  std::vector<int> world(config_.size);
  for (int r = 0; r < config_.size; ++r) world[r] = r;
  sets.push_back(make_set(0, world, config_.rank));
  for (const std::vector<int>& ranks : initial_sets)
    sets.push_back(make_set(static_cast<int32_t>(sets.size()), validate_ranks(ranks, config_.size), config_.rank));
  first_dynamic_id_ = static_cast<int32_t>(sets.size());
  if (config_.elastic_round >= 0) first_dynamic_id_ += config_.elastic_round * RuntimeConfig::kElasticRoundIds;
  try {
    for (const ProcessSet& set : sets) {
      table_->insert(set);
      if (set.included()) create_set(set);
    }
    engine(0)->wait_connected();
  } catch (...) {
    shutdown();
    throw;
  }
}

Runtime::~Runtime() { shutdown(); }

std::shared_ptr<Store> Runtime::set_store_of(int32_t id) const {
  return make_prefix_store("process_set." + std::to_string(id), store_);
}

void Runtime::create_set(const ProcessSet& set, std::shared_ptr<Store> set_store, std::shared_ptr<void> head_start) {
  auto timeout = set.id == 0 ? config_.start_timeout : config_.timeout;
  if (!set_store) set_store = set_store_of(set.id);
  TransportPlanner* planner = planner_.get();
  PresenceOptions presence{timeout, std::chrono::milliseconds{0}};
  if (config_.stall_warning_time.count() > 0) presence.warning_time = std::min(kAbsenceWarningTime, config_.stall_warning_time);
  auto connect = [planner, set, set_store, job_store = store_, presence, head_start,
                  my_rank = config_.rank](const std::atomic<bool>& cancelled) mutable {
    // What the planner does while the others arrive, unless done already.
    await_members(
        *set_store, *job_store, set, presence, cancelled,
        [&] {
          if (!head_start) head_start = planner->prepare(set.ranks, my_rank, set_store);
        },
        [&](std::chrono::milliseconds within) { return planner->await_arrival(head_start, within); });
    return planner->connect(set.ranks, my_rank, set_store, presence.timeout, cancelled);
  };
  EngineOptions options{set.id, set.ranks, set.rank, config_.fusion_threshold, config_.cache_capacity,
                        config_.timeout, config_.stall_warning_time, config_.stall_shutdown_time,
                        planner_->name(), timeline_, config_.divergence_timeout};
  auto engine = std::make_shared<ProgressEngine>(std::move(options), connect, pool_);
  std::lock_guard<std::mutex> lock(mutex_);
  engines_[set.id] = std::move(engine);
}

ProcessSet Runtime::add_process_set(std::vector<int> ranks, SetOrigin origin) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_down_) throw InvalidArgument("hora has been shut down");
  }
  ranks = validate_ranks(std::move(ranks), config_.size);
  ProcessSet set = make_set(-1, ranks, config_.rank);
  set.generation = table_->next_generation(ranks, origin);
  if (!set.included()) return set;
  // The lowest member prepares the set (the planner makes its shared-memory
  // segment) and announces itself before publishing the id: what it wrote
  // meanwhile travels with the id, so that the others need no further
  // round trip to the store to connect.
  std::shared_ptr<CarriedStore> set_store;
  std::shared_ptr<void> head_start;
  if (config_.rank == ranks.front()) {
    set.id = dynamic_process_set_id(first_dynamic_id_, config_.size, config_.rank,
                                    table_->next_lowest_member_sequence());
    set_store = std::make_shared<CarriedStore>(set_store_of(set.id));
    announce_presence(*set_store, config_.rank);
    head_start = planner_->prepare(set.ranks, config_.rank, set_store);
    publish_process_set_id(*store_, ranks, origin, set.generation, set.id, set_store->take_written());
  } else {
    PublishedSet published = published_process_set(*store_, ranks, origin, set.generation, config_.timeout);
    set.id = published.id;
    set_store = std::make_shared<CarriedStore>(set_store_of(set.id));
    set_store->keep(published.carried);
  }
  table_->insert(set);
  create_set(set, set_store, std::move(head_start));
  return set;
}

bool Runtime::remove_process_set(int32_t id) {
  if (id == 0) return false;
  std::shared_ptr<ProgressEngine> removed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = engines_.find(id);
    if (it == engines_.end()) return false;
    removed = it->second;
  }
  // Every member removes the set: wait for all of them before stopping it.
  try {
    OpArgs barrier;
    barrier.op = OpType::kBarrier;
    barrier.name = "hora.remove_process_set";
    removed->submit(make_request(process_set(id), barrier), {}, {})->wait();
  } catch (const Error&) {
    // A broken set is removed all the same.
  }
  table_->erase(id);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engines_.erase(id);
  }
  removed->stop("process set " + std::to_string(id) + " has been removed");
  return true;
}

int32_t Runtime::process_set_id(const std::vector<int>& ranks, int generation) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_down_) throw InvalidArgument("hora has been shut down");
  }
  if (generation < 0) throw InvalidArgument("generation " + std::to_string(generation) + " is negative");
  return published_process_set_id(*store_, validate_ranks(ranks, config_.size), SetOrigin::kAdded, generation,
                                  config_.timeout);
}

ProcessSet Runtime::process_set(int32_t id) const { return table_->get(id); }

std::vector<ProcessSet> Runtime::process_sets() const {
  std::vector<ProcessSet> out;
  for (int32_t id : table_->ids()) out.push_back(table_->get(id));
  return out;
}

std::shared_ptr<ProgressEngine> Runtime::engine(int32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shut_down_) throw InvalidArgument("hora has been shut down; call init() first");
  auto it = engines_.find(id);
  return it == engines_.end() ? nullptr : it->second;
}

std::shared_ptr<Work> Runtime::enqueue(int32_t id, OpArgs args) {
  std::shared_ptr<ProgressEngine> target = engine(id);
  ProcessSet set = table_->get(id);
  Request request = make_request(set, args);
  if (!target) throw Internal("process set " + std::to_string(id) + " has no engine on a member rank");
  return target->submit(std::move(request), args.input, args.output, args.caller_waits);
}

void Runtime::shutdown(bool goodbye) {
  std::map<int32_t, std::shared_ptr<ProgressEngine>> engines;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_down_) return;
    shut_down_ = true;
    engines.swap(engines_);
  }
  for (auto& [id, engine] : engines) engine->stop("hora has been shut down", goodbye);
  timeline_->stop();
}

SetMetrics Runtime::metrics(int32_t id) const {
  std::shared_ptr<ProgressEngine> set_engine;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = engines_.find(id);
    if (it != engines_.end()) set_engine = it->second;
  }
  if (!set_engine)
    throw InvalidArgument("process set " + std::to_string(id) + " is not a live set this rank (global rank " +
                          std::to_string(config_.rank) + ") belongs to");
  return set_engine->metrics();
}

void Runtime::start_timeline(const std::string& path, bool mark_cycles) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_down_) throw InvalidArgument("hora has been shut down");
  }
  timeline_->start(timeline_file(path, config_.rank), mark_cycles);
}

void Runtime::stop_timeline() { timeline_->stop(); }

std::string Runtime::timeline_file(const std::string& path, int rank) {
  if (rank == 0) return path;
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string tag = ".rank" + std::to_string(rank);
  return has_extension ? path.substr(0, dot) + tag + path.substr(dot) : path + tag;
}

}  // namespace hora
