// The one place that decides how a process set is connected: its data
// plane (shared memory on one host, a hierarchical composition across
// hosts, or the job's network transport), its control plane beside it, and
// its fast lane.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "control/agreement.h"
#include "control/control_plane.h"
#include "hora/runtime_config.h"
#include "hora/store.h"
#include "transport/backend.h"
#include "transport/shm/fast_lane.h"
#include "transport/shm/segment_setup.h"
#include "util/cpu_placement.h"

namespace hora {

namespace shm {
class Attachment;
}  // namespace shm
namespace hierarchical {
struct HostLayout;
}  // namespace hierarchical

// What one member uses of one process set.
struct SetTransports {
  std::unique_ptr<Backend> backend;       // the data plane
  std::unique_ptr<ControlPlane> control;  // negotiation messages
  // The set's fast lane when its members share one segment, else null;
  // owned with the segment by `backend` and `control`, valid while either
  // lives.
  shm::FastLane* fast_lane = nullptr;
  // Without a fast lane: cached ops are agreed by messages without the
  // coordinator's round trip (control/stream_agreement.h), drivers looking
  // for their entry this long before they sleep; false: every op is
  // negotiated (HORA_AGREEMENT=negotiated).
  bool stream_agreement = true;
  std::chrono::nanoseconds agreement_spin{std::chrono::microseconds(100)};
  // An agreement the planner made for the set: a host agreement
  // (control/host_agreement.h) where every host's members share a segment;
  // else null, and SetLinks chooses from the above.
  std::unique_ptr<control::Agreement> agreement;
  // What `agreement` and `control` point into (a host's lane and its
  // wake-up sockets); SetLinks keeps it until both are gone.
  std::shared_ptr<void> agreement_parts;
};

// What a planner may do with shared memory.
struct ShmOptions {
  bool enabled = true;        // false: every set takes the network path (HORA_SHM=0)
  size_t slot_bytes = 0;      // per member and buffer, a multiple of 4096; 0: 1 MiB
  std::string host_identity;  // added to this host's identity (tests simulate hosts)
  int host_ranks = 0;         // the job's ranks on this host (0: unknown); waits spin less when
                              // they (or the job's ranks on this machine) outnumber the cores
  int world_size = 0;         // the job's ranks (0: unknown); a set naming a rank beyond them is
                              // refused at once
};

struct PlannerOptions {
  // Nullopt: no shared memory at all, every set on the network transport
  // (no host identities are exchanged).
  std::optional<ShmOptions> shm;
  // Where the TCP control plane listens.
  std::string hostname = "127.0.0.1";
  // Its connections to a host that answers nothing for this long break
  // (net::watch_liveness; 0: never).
  std::chrono::milliseconds link_timeout{0};
  // Sets without a fast lane agree on cached ops without the coordinator
  // (SetTransports::stream_agreement).
  bool stream_agreement = true;
  // Sets over hosts that each have a segment agree in the hosts' lanes and
  // between their leaders (SetTransports::agreement); false: by the stream
  // agreement among every member.
  bool host_agreement = true;
  // Where this machine runs more of the job's ranks than it has CPUs, and
  // they belong to several host identities (containers or network
  // namespaces of one machine), each rank holds its threads on one CPU
  // (util/cpu_placement.h; HORA_BIND=none: never).
  bool place_ranks = true;
};

// The options a job's RuntimeConfig asks for: shared memory for a job of
// two ranks or more, the control plane on its listen address.
PlannerOptions planner_options(const RuntimeConfig& config);

// Plans every set of one process. With shared memory, sets whose members
// all publish the same host identity (boot id, host name, /dev/shm device,
// pid namespace) in the set's store get its segment: a ShmBackend, the
// rings as control plane and the fast lane; sets over several hosts, one
// of them with two members or more, a HierarchicalBackend (shared memory
// inside each host, `network` between hosts); other sets, and a set whose
// segment cannot be made or mapped (with one warning), `network`'s
// backends. Every set not on one segment takes the TCP star as control
// plane (in-process mailboxes when `network` is the local transport, whose
// ranks are threads). connect() may run on several threads at once, one
// per set, and follows BackendFactory::create's contract.
class TransportPlanner {
 public:
  TransportPlanner(std::unique_ptr<BackendFactory> network, PlannerOptions options);
  ~TransportPlanner();

  // The network transport's name ("tcp", "gloo", "mpi", "local").
  std::string name() const;
  // Work this member may do for a set before the others have arrived
  // (publishing its host identity; with shared memory, making the set's
  // segment on set rank 0, or mapping it on the others when the set store
  // holds its record already), which connect() with the same set store then
  // picks up. The result must outlive that connect(); dropping it undoes
  // the work if connect() did not take it.
  std::shared_ptr<void> prepare(const std::vector<int>& global_ranks, int my_global_rank,
                                const std::shared_ptr<Store>& set_store);
  // Waits up to `within` for every member to arrive, as far as what
  // prepare() returned shows without asking the store (each member has
  // attached the segment). False when they have not, or when it cannot tell.
  bool await_arrival(const std::shared_ptr<void>& head_start, std::chrono::milliseconds within) const;
  SetTransports connect(const std::vector<int>& global_ranks, int my_global_rank, std::shared_ptr<Store> set_store,
                        std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled);
  // The same, never cancelled.
  SetTransports connect(const std::vector<int>& global_ranks, int my_global_rank, std::shared_ptr<Store> set_store,
                        std::chrono::milliseconds timeout);

 private:
  class HostIdentities;

  std::optional<SetTransports> connect_shared(const std::vector<int>& global_ranks, int rank, Store& store,
                                              std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled,
                                              shm::HeadStart* head,
                                              std::shared_ptr<shm::Attachment>* attachment = nullptr) const;
  SetTransports connect_across_hosts(const std::vector<int>& global_ranks, int rank,
                                     const std::vector<std::string>& identities,
                                     const std::shared_ptr<Store>& set_store, std::chrono::milliseconds timeout,
                                     const std::atomic<bool>& cancelled) const;
  void add_host_agreement(SetTransports& transports, const hierarchical::HostLayout& layout, int rank,
                          std::shared_ptr<shm::Attachment> segment, Store& store, std::chrono::milliseconds timeout,
                          const std::atomic<bool>& cancelled) const;
  SetTransports connect_network(const std::vector<int>& global_ranks, int rank, std::shared_ptr<Store> set_store,
                                std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled,
                                const std::vector<std::string>& identities = {}) const;
  SetTransports network_transports(const std::vector<std::string>& identities = {}, int rank = 0) const;
  std::unique_ptr<ControlPlane> network_control(const std::vector<int>& global_ranks, int rank, Store& store,
                                                std::chrono::milliseconds timeout,
                                                const std::atomic<bool>& cancelled) const;
  std::shared_ptr<shm::HeadStart> take_head_start(const Store& store);
  // The job's ranks on this machine as far as known, at least its ranks on
  // this host (0: unknown): several hosts of the job may be containers or
  // network namespaces of one machine, their ranks sharing its cores.
  int machine_ranks() const;
  // Once the job's set has taught every rank's identity (`identities`, by
  // global rank): this rank's place on a crowded machine (place_ranks).
  void place_on_machine(const std::vector<std::string>& identities, int my_global_rank);

  const std::unique_ptr<BackendFactory> network_;
  const PlannerOptions options_;
  const bool in_process_;  // the network transport's ranks are threads of this process
  std::unique_ptr<HostIdentities> hosts_;            // with shared memory only
  std::optional<shm::SegmentSetup> segments_;        // with shared memory only
  std::mutex head_starts_mutex_;
  std::map<const Store*, std::weak_ptr<shm::HeadStart>> head_starts_;  // by set store
  std::mutex placement_mutex_;
  bool placed_ = false;                      // guarded by placement_mutex_
  std::unique_ptr<CpuPlacement> placement_;  // guarded by placement_mutex_; null: not placed
};

std::unique_ptr<TransportPlanner> make_transport_planner(std::unique_ptr<BackendFactory> network,
                                                         PlannerOptions options = {});

}  // namespace hora
