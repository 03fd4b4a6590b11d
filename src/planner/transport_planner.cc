#include "planner/transport_planner.h"

#include <algorithm>

#include "control/control_channel.h"
#include "control/host_agreement.h"
#include "control/in_process_control.h"
#include "control/shm_control_plane.h"
#include "hora/errors.h"
#include "store/cancellable_wait.h"
#include "transport/hierarchical/hierarchical_backend.h"
#include "transport/shm/attachment.h"
#include "transport/shm/host_doorbells.h"
#include "transport/shm/segment_setup.h"
#include "transport/shm/shm_backend.h"
#include "util/caller_waits.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

const std::string kOff = "off|";  // host identities of members with the path off

// The identity of a member with the path off: one nobody else has, which
// still names its machine (shm::machine_of), so that its cores are counted.
std::string off_identity(const std::string& machine, int global_rank) {
  return kOff + machine + "|" + std::to_string(global_rank);
}

// The machine an identity names, with the path on or off; "" where unknown
// (a boot id that could not be read).
std::string machine_named(const std::string& identity) {
  if (identity.rfind(kOff, 0) != 0) return shm::machine_of(identity);
  const size_t end = identity.find('|', kOff.size());
  return end == std::string::npos ? "" : identity.substr(kOff.size(), end - kOff.size());
}

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string read(Store& store, const std::string& key, milliseconds timeout, const std::atomic<bool>& cancelled,
                 const std::vector<int>& global_ranks) {
  const std::vector<uint8_t> value = get_unless_cancelled(store, key, timeout, cancelled, kCancelPoll,
                                                          describe_set(global_ranks) + ": connecting shared memory");
  return {value.begin(), value.end()};
}

}  // namespace

// Where each rank of the job runs, as far as this process has learnt it:
// every member publishes its host identity in each set's store (prepare()
// or connect() does); the others' are read from the store only when this
// process has not learnt them in an earlier set (the global set teaches
// every rank's, so later sets need no store round trip for them). Any thread.
class TransportPlanner::HostIdentities {
 public:
  explicit HostIdentities(const ShmOptions& options)
      : enabled_(options.enabled), mine_(shm::this_host_identity(options.host_identity)) {}

  // This member's identity; with the path off, one nobody else has.
  std::string mine(int global_rank) const {
    return enabled_ ? mine_ : off_identity(shm::machine_of(mine_), global_rank);
  }

  void publish(const std::vector<int>& global_ranks, int rank, Store& store) const {
    store.post("shm/host/" + std::to_string(rank), bytes_of(mine(global_ranks[rank])));
  }

  // Every member's identity, by set rank; when a member has the path off,
  // one per member, so that nobody shares memory or composes hosts.
  std::vector<std::string> of(const std::vector<int>& global_ranks, int rank, Store& store, milliseconds timeout,
                              const std::atomic<bool>& cancelled) {
    std::vector<std::string> identities = known(global_ranks);
    if (identities.empty()) {
      for (size_t r = 0; r < global_ranks.size(); ++r) {
        identities.push_back(static_cast<int>(r) == rank
                                 ? mine(global_ranks[r])
                                 : read(store, "shm/host/" + std::to_string(r), timeout, cancelled, global_ranks));
      }
      learn(global_ranks, identities);
    }
    const bool some_off = std::any_of(identities.begin(), identities.end(),
                                      [](const std::string& identity) { return identity.rfind(kOff, 0) == 0; });
    if (!some_off) return identities;
    for (size_t r = 0; r < global_ranks.size(); ++r)
      identities[r] = off_identity(machine_named(identities[r]), global_ranks[r]);
    return identities;
  }

  // How many of the job's ranks known so far run on this process's machine
  // (hosts that are containers or network namespaces of one machine share
  // its boot, and its cores), this one included; 0 where the machine is
  // unknown. The job's first set teaches every rank's identity; a set that
  // connects before it has finished counts what is known by then.
  int ranks_on_this_machine() const {
    const std::string machine = shm::machine_of(mine_);
    if (machine.empty()) return 0;
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(std::count_if(by_rank_.begin(), by_rank_.end(), [&](const auto& known) {
      return machine_named(known.second) == machine;
    }));
  }

  // Whether every member is known to share this host, with the path on.
  bool known_on_one_host(const std::vector<int>& global_ranks) const {
    const std::vector<std::string> identities = known(global_ranks);
    return !identities.empty() && enabled_ &&
           std::all_of(identities.begin(), identities.end(),
                       [&](const std::string& identity) { return identity == identities[0]; });
  }

 private:
  // The identities of `global_ranks` if every one is known, else none.
  std::vector<std::string> known(const std::vector<int>& global_ranks) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> identities;
    for (int global_rank : global_ranks) {
      auto it = by_rank_.find(global_rank);
      if (it == by_rank_.end()) return {};
      identities.push_back(it->second);
    }
    return identities;
  }

  void learn(const std::vector<int>& global_ranks, const std::vector<std::string>& identities) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t r = 0; r < global_ranks.size(); ++r) by_rank_.emplace(global_ranks[r], identities[r]);
  }

  const bool enabled_;
  const std::string mine_;
  mutable std::mutex mutex_;
  std::map<int, std::string> by_rank_;  // by global rank
};

PlannerOptions planner_options(const RuntimeConfig& config) {
  PlannerOptions options;
  if (config.size > 1)
    options.shm = ShmOptions{config.shm, config.shm_slot_bytes, config.host_identity, config.local_size, config.size};
  options.hostname = config.hostname;
  options.link_timeout = config.link_timeout;
  options.stream_agreement = config.stream_agreement;
  options.host_agreement = config.host_agreement;
  options.place_ranks = config.place_ranks;
  return options;
}

TransportPlanner::TransportPlanner(std::unique_ptr<BackendFactory> network, PlannerOptions options)
    : network_(std::move(network)), options_(std::move(options)), in_process_(network_ && network_->name() == "local") {
  if (!network_) throw InvalidArgument("transport planner: no network transport");
  if (options_.shm) {
    hosts_ = std::make_unique<HostIdentities>(*options_.shm);
    segments_.emplace(options_.shm->slot_bytes, network_->name());
  }
}

TransportPlanner::~TransportPlanner() = default;

std::string TransportPlanner::name() const { return network_->name(); }

std::shared_ptr<void> TransportPlanner::prepare(const std::vector<int>& global_ranks, int my_global_rank,
                                                const std::shared_ptr<Store>& set_store) {
  if (!hosts_ || global_ranks.size() < 2 || !set_store) return nullptr;
  const int rank = set_rank_of(global_ranks, my_global_rank);
  hosts_->publish(global_ranks, rank, *set_store);
  std::shared_ptr<shm::HeadStart> head;
  if (hosts_->known_on_one_host(global_ranks)) {
    head = segments_->prepare(global_ranks, rank, *set_store);
  } else {
    head = std::make_shared<shm::HeadStart>();
    head->rank = rank;
  }
  std::lock_guard<std::mutex> lock(head_starts_mutex_);
  std::erase_if(head_starts_, [](const auto& entry) { return entry.second.expired(); });  // sets never connected
  head_starts_[set_store.get()] = head;
  return head;
}

bool TransportPlanner::await_arrival(const std::shared_ptr<void>& head_start, milliseconds within) const {
  if (!segments_) return false;
  return segments_->await_arrival(static_cast<const shm::HeadStart*>(head_start.get()), within);
}

std::shared_ptr<shm::HeadStart> TransportPlanner::take_head_start(const Store& store) {
  std::lock_guard<std::mutex> lock(head_starts_mutex_);
  auto it = head_starts_.find(&store);
  if (it == head_starts_.end()) return nullptr;
  std::shared_ptr<shm::HeadStart> head = it->second.lock();
  head_starts_.erase(it);
  return head;
}

SetTransports TransportPlanner::connect(const std::vector<int>& global_ranks, int my_global_rank,
                                        std::shared_ptr<Store> set_store, milliseconds timeout) {
  const std::atomic<bool> never{false};
  return connect(global_ranks, my_global_rank, std::move(set_store), timeout, never);
}

SetTransports TransportPlanner::connect(const std::vector<int>& global_ranks, int my_global_rank,
                                        std::shared_ptr<Store> set_store, milliseconds timeout,
                                        const std::atomic<bool>& cancelled) {
  const int rank = set_rank_of(global_ranks, my_global_rank);
  if (options_.shm && options_.shm->world_size > 0 && global_ranks.back() >= options_.shm->world_size)
    throw InvalidArgument("backend: global rank " + std::to_string(global_ranks.back()) + " is not in the job's " +
                          std::to_string(options_.shm->world_size) + " ranks");
  if (!set_store) throw InvalidArgument("backend: the set store is null");
  std::vector<std::string> identities;
  if (hosts_ && global_ranks.size() > 1) {
    const std::shared_ptr<shm::HeadStart> head = take_head_start(*set_store);
    if (!head) hosts_->publish(global_ranks, rank, *set_store);
    identities = hosts_->of(global_ranks, rank, *set_store, timeout, cancelled);
    if (static_cast<int>(global_ranks.size()) == options_.shm->world_size) place_on_machine(identities, my_global_rank);
    const hierarchical::HostLayout layout = hierarchical::plan_hosts(identities);
    if (layout.hosts.size() == 1) {
      if (auto shared = connect_shared(global_ranks, rank, *set_store, timeout, cancelled, head.get()))
        return std::move(*shared);
    } else if (hierarchical::worth_composing(layout)) {
      return connect_across_hosts(global_ranks, rank, identities, set_store, timeout, cancelled);
    }
  }
  return connect_network(global_ranks, rank, std::move(set_store), timeout, cancelled, identities);
}

// One segment for the set: ShmBackend and the rings, sharing the member's
// attachment. Nullopt when the segment cannot be used.
std::optional<SetTransports> TransportPlanner::connect_shared(const std::vector<int>& global_ranks, int rank,
                                                              Store& store, milliseconds timeout,
                                                              const std::atomic<bool>& cancelled,
                                                              shm::HeadStart* head,
                                                              std::shared_ptr<shm::Attachment>* attachment) const {
  std::optional<shm::Segment> segment = segments_->attach(global_ranks, rank, store, timeout, cancelled, head);
  if (!segment) return std::nullopt;
  auto member = std::make_shared<shm::Attachment>(
      global_ranks, rank, std::move(*segment), timeout,
      shm::tuning_for(global_ranks.size(), machine_ranks()));
  SetTransports transports;
  transports.fast_lane = member->lane ? &*member->lane : nullptr;
  if (attachment) *attachment = member;
  transports.backend = std::make_unique<shm::ShmBackend>(member);
  transports.control = std::make_unique<control::ShmControlPlane>(std::move(member));
  return transports;
}

// Shared memory inside each host (the network path on a host whose
// segment cannot be used), the network transport between hosts, and the
// network control plane over every member (the parts give no star: a
// member of another host is reached by neither the local part nor, unless
// a leader, the leaders' part).
SetTransports TransportPlanner::connect_across_hosts(const std::vector<int>& global_ranks, int rank,
                                                     const std::vector<std::string>& identities,
                                                     const std::shared_ptr<Store>& set_store, milliseconds timeout,
                                                     const std::atomic<bool>& cancelled) const {
  auto network = [&](const std::vector<int>& ranks, int me, std::shared_ptr<Store> store) {
    return network_->create(ranks, me, std::move(store), timeout, cancelled);
  };
  std::shared_ptr<shm::Attachment> host_segment;
  auto local = [&](const std::vector<int>& ranks, int me, std::shared_ptr<Store> store) -> std::unique_ptr<Backend> {
    if (auto shared = connect_shared(ranks, set_rank_of(ranks, me), *store, timeout, cancelled, nullptr, &host_segment))
      return std::move(shared->backend);
    return network(ranks, me, std::move(store));
  };
  SetTransports transports = network_transports(identities, rank);
  transports.control = network_control(global_ranks, rank, *set_store, timeout, cancelled);
  const hierarchical::HostLayout layout = hierarchical::plan_hosts(identities);
  transports.backend = hierarchical::make_hierarchical_backend(global_ranks, rank, layout, set_store, local, network);
  if (transports.stream_agreement && options_.host_agreement)
    add_host_agreement(transports, layout, rank, std::move(host_segment), *set_store, timeout, cancelled);
  return transports;
}

namespace {

// What a host agreement points into: this host's segment, its lane, and
// the wake-ups between its members.
struct HostLaneParts {
  std::shared_ptr<shm::Attachment> segment;
  std::unique_ptr<shm::HostDoorbells> bells;
  std::unique_ptr<shm::FastLane> lane;
};

}  // namespace

// Where every host has two members or more sharing a segment, the set
// agrees on cached ops in each host's lane and between the hosts' leaders
// (control/host_agreement.h). Every member decides alike: from the layout,
// the control plane's kind, and each host's leader saying in the set store
// whether its host has a segment.
void TransportPlanner::add_host_agreement(SetTransports& transports, const hierarchical::HostLayout& layout, int rank,
                                          std::shared_ptr<shm::Attachment> segment, Store& store, milliseconds timeout,
                                          const std::atomic<bool>& cancelled) const {
  if (layout.hosts.front().front() != 0) return;
  for (const std::vector<int>& members : layout.hosts)
    if (members.size() < 2 || !shm::FastLane::supports(static_cast<int>(members.size()))) return;
  auto parts = std::make_shared<HostLaneParts>();
  if (segment) {
    parts->segment = segment;
    parts->bells = std::make_unique<shm::HostDoorbells>(segment->segment, segment->rank, segment->size());
    shm::HostDoorbells* bells = parts->bells.get();
    parts->lane = std::make_unique<shm::FastLane>(segment->segment, segment->rank, segment->size(), segment->bells,
                                                  segment->seats, segment->tuning.spin, shm::FastLane::Mode::kHost,
                                                  [bells](int member) { bells->ring(member); },
                                                  segment->tuning.yield_look);
  }
  if (!transports.control->can_wake_on_descriptors()) return;
  const int host = layout.host_of.at(static_cast<size_t>(rank));
  if (layout.is_leader(rank)) store.post("hierarchical/host_lane." + std::to_string(host), {segment ? uint8_t{1} : uint8_t{0}});
  std::vector<std::string> keys;
  for (size_t h = 0; h < layout.hosts.size(); ++h) keys.push_back("hierarchical/host_lane." + std::to_string(h));
  const std::string what = "the hosts' lanes: ";
  wait_unless_cancelled(store, keys, timeout, cancelled, kCancelPoll, what);
  for (const std::string& key : keys)
    if (get_unless_cancelled(store, key, timeout, cancelled, kCancelPoll, what) != std::vector<uint8_t>{1}) return;
  if (!segment)
    throw Internal("host " + std::to_string(host) + "'s leader has its host's segment and this member has not");
  shm::HostDoorbells* bells = parts->bells.get();
  transports.control->also_wake_on(bells->fd(), [bells] { bells->clear(); });
  bool carries = true;
  for (const std::vector<int>& members : layout.hosts) carries &= members.size() <= shm::kMaxCarryingRanks;
  ControlPlane* control = transports.control.get();
  transports.agreement = std::make_unique<control::HostAgreement>(
      *parts->lane, carries, layout.hosts, rank,
      [control](int to, const std::vector<uint8_t>& bytes) { control->send(to, bytes); }, [control] { control->wake(); },
      transports.agreement_spin);
  transports.agreement_parts = std::move(parts);
}

// The control plane first: the data plane's connection then finds every
// member holding its end (the in-process mailboxes are kept alive by their
// members alone, so a member that finished and left before another joined
// them would leave it nothing to join).
SetTransports TransportPlanner::connect_network(const std::vector<int>& global_ranks, int rank,
                                                std::shared_ptr<Store> set_store, milliseconds timeout,
                                                const std::atomic<bool>& cancelled,
                                                const std::vector<std::string>& identities) const {
  SetTransports transports = network_transports(identities, rank);
  transports.control = network_control(global_ranks, rank, *set_store, timeout, cancelled);
  transports.backend = network_->create(global_ranks, global_ranks[rank], set_store, timeout, cancelled);
  return transports;
}

// Places this rank where this machine runs the job's ranks of two hosts or
// more (hosts that are namespaces or containers of one machine) and they
// outnumber its online CPUs: its threads on one CPU (CpuPlacement), the
// machine's ranks in blocks by host (hosts in the order of their lowest
// global rank, ranks in global-rank order inside a host), so that a host's
// ranks share a CPU and the hosts run side by side (docs/performance.md,
// "Ranks placed on a crowded machine"). Once, for the job's set; not with
// HORA_BIND=none, nor where a launcher narrowed the process's CPUs.
void TransportPlanner::place_on_machine(const std::vector<std::string>& identities, int my_global_rank) {
  std::lock_guard<std::mutex> lock(placement_mutex_);
  if (placed_ || !options_.place_ranks || in_process_) return;
  placed_ = true;
  const std::string machine = machine_named(identities[static_cast<size_t>(my_global_rank)]);
  if (machine.empty()) return;
  std::vector<std::string> hosts;  // in order of their lowest global rank
  std::vector<std::pair<size_t, int>> ranks;  // (host, global rank) of this machine's ranks
  for (size_t r = 0; r < identities.size(); ++r) {
    if (machine_named(identities[r]) != machine) continue;
    auto host = std::find(hosts.begin(), hosts.end(), identities[r]);
    if (host == hosts.end()) host = hosts.insert(hosts.end(), identities[r]);
    ranks.emplace_back(static_cast<size_t>(host - hosts.begin()), static_cast<int>(r));
  }
  if (hosts.size() < 2) return;
  std::sort(ranks.begin(), ranks.end());
  const auto mine = std::find_if(ranks.begin(), ranks.end(), [&](const auto& r) { return r.second == my_global_rank; });
  placement_ = CpuPlacement::place(static_cast<int>(mine - ranks.begin()), static_cast<int>(ranks.size()));
}

int TransportPlanner::machine_ranks() const {
  if (!options_.shm) return 0;
  return std::max(options_.shm->host_ranks, hosts_ ? hosts_->ranks_on_this_machine() : 0);
}

// A set on the network control plane: its agreement, whose drivers spin
// only briefly where this host's ranks outnumber its cores, or where the
// job's ranks on this machine do (hosts that are containers or network
// namespaces of one machine: their identities name its boot), or the set's
// members on it (`identities` of the members, by set rank, where known;
// a machine whose boot could not be read counts as unknown).
SetTransports TransportPlanner::network_transports(const std::vector<std::string>& identities, int rank) const {
  SetTransports transports;
  transports.stream_agreement = options_.stream_agreement;
  size_t busy = static_cast<size_t>(std::max(machine_ranks(), 0));
  const std::string machine = identities.empty() ? "" : machine_named(identities[rank]);
  if (!machine.empty()) {
    busy = std::max(busy, static_cast<size_t>(std::count_if(identities.begin(), identities.end(),
                                                             [&](const std::string& identity) {
                                                               return machine_named(identity) == machine;
                                                             })));
  }
  if (more_than_cores(busy)) transports.agreement_spin = kUnwatchedSpin;
  return transports;
}

std::unique_ptr<ControlPlane> TransportPlanner::network_control(const std::vector<int>& global_ranks, int rank,
                                                                Store& store, milliseconds timeout,
                                                                const std::atomic<bool>& cancelled) const {
  if (in_process_) return control::InProcessControlPlane::connect(global_ranks, rank, store, timeout, cancelled);
  return control::ControlChannel::connect(global_ranks, rank, describe_set(global_ranks), options_.hostname, store,
                                          timeout, cancelled, options_.link_timeout);
}

std::unique_ptr<TransportPlanner> make_transport_planner(std::unique_ptr<BackendFactory> network,
                                                         PlannerOptions options) {
  return std::make_unique<TransportPlanner>(std::move(network), std::move(options));
}

}  // namespace hora
