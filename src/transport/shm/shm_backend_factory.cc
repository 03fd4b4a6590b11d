// make_shm_backend_factory: decides per process set, from the host
// identities its members publish in the set's store, whether the set lives
// on one host; such a set gets one shared-memory segment and ShmBackends. A
// set over several hosts, one of them with two members or more, gets a
// HierarchicalBackend (shared memory inside each host, the network factory
// between hosts); every other set (and one whose segment cannot be made)
// the network factory's backends.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "control/control_channel.h"
#include "hora/errors.h"
#include "store/cancellable_wait.h"
#include "transport/backend.h"
#include "transport/hierarchical/hierarchical_backend.h"
#include "transport/shm/shm_backend.h"
#include "transport/shm/sync.h"
#include "util/log.h"

namespace hora {
namespace {

using shm::Segment;
using shm::SegmentLayout;
using std::chrono::milliseconds;

constexpr size_t kDefaultSlotBytes = size_t{1} << 20;
constexpr uint64_t kRingBytes = uint64_t{1} << 14;
constexpr char kSegmentKey[] = "shm/segment";  // "<name> <bytes>", or "-<why there is none>"
constexpr char kReadyKey[] = "shm/ready";      // "ok <name> <bytes>" once made, or "-<why not>"
const std::string kOff = "off|";               // host identities of members with the path off

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

int set_rank_of(const std::vector<int>& global_ranks, int my_global_rank) {
  if (global_ranks.empty() || !std::is_sorted(global_ranks.begin(), global_ranks.end()) ||
      std::adjacent_find(global_ranks.begin(), global_ranks.end()) != global_ranks.end())
    throw InvalidArgument("backend: a process set's global ranks must be sorted and distinct");
  auto it = std::lower_bound(global_ranks.begin(), global_ranks.end(), my_global_rank);
  if (it == global_ranks.end() || *it != my_global_rank)
    throw InvalidArgument("backend: global rank " + std::to_string(my_global_rank) + " is not a member of the process set");
  return static_cast<int>(it - global_ranks.begin());
}

// What makes two processes able to share a segment and watch each other's
// pids: the same kernel boot, host name, /dev/shm file system and pid
// namespace. `claimed` (tests) is appended.
std::string this_host_identity(const std::string& claimed) {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  struct stat shm_dir {}, pid_namespace {};
  stat("/dev/shm", &shm_dir);
  stat("/proc/self/ns/pid", &pid_namespace);
  return boot_id + "|" + host + "|" + std::to_string(shm_dir.st_dev) + "|" + std::to_string(pid_namespace.st_ino) +
         "|" + claimed;
}

// Unlinks a segment's name when it goes out of scope.
struct NameGuard {
  std::string name;
  ~NameGuard() {
    if (!name.empty()) shm::unlink_segment(name);
  }
};

// What prepare() did for a set: published this member's host identity;
// on set rank 0 of a set known to share this host, tried to make the
// segment (`made`); on another member whose set store held the segment's
// record (it came with the set's id), mapped it and marked itself attached
// (`opened`). The name is unlinked with the guard unless create() takes it.
// Dropped with the segment still in it (the set's connection was cancelled
// or failed before create() took it), it marks this member departed and
// rings the others, so that a member which saw it attach fails its first
// op at once instead of at the op timeout.
struct HeadStart {
  bool made = false;
  bool ok = false;  // made, and the segment is usable
  bool opened = false;
  int rank = 0;  // this member's set rank
  Segment segment;
  NameGuard guard;

  ~HeadStart() {
    if (segment.mapped()) shm::mark_departed(segment, rank);
  }
};

class ShmBackendFactory final : public BackendFactory {
 public:
  ShmBackendFactory(std::unique_ptr<BackendFactory> network, ShmOptions options)
      : network_(std::move(network)),
        options_(std::move(options)),
        host_identity_(this_host_identity(options_.host_identity)) {
    if (!network_) throw InvalidArgument("shm backend: no network factory to fall back on");
  }

  std::string name() const override { return network_->name(); }

  // While the others arrive, a member publishes its host identity, and set
  // rank 0 of a set whose members are known to share this host makes the
  // segment.
  std::shared_ptr<void> prepare(const std::vector<int>& global_ranks, int my_global_rank,
                                const std::shared_ptr<Store>& set_store) override {
    if (global_ranks.size() < 2 || !set_store) return nullptr;
    const int rank = set_rank_of(global_ranks, my_global_rank);
    publish_identity(global_ranks, rank, *set_store);
    auto head = std::make_shared<HeadStart>();
    head->rank = rank;
    const std::vector<std::string> identities = known_identities(global_ranks);
    const bool one_host = !identities.empty() && options_.enabled &&
                          std::all_of(identities.begin(), identities.end(),
                                      [&](const std::string& identity) { return identity == identities[0]; });
    if (rank == 0 && one_host) {
      head->made = true;
      head->ok = make_segment(static_cast<uint32_t>(global_ranks.size()), *set_store, head->guard, head->segment,
                              control::describe_set(global_ranks));
    } else if (rank > 0 && one_host) {
      open_ahead(*head, static_cast<uint32_t>(global_ranks.size()), rank, *set_store);
    }
    std::lock_guard<std::mutex> lock(identities_mutex_);
    std::erase_if(head_starts_, [](const auto& entry) { return entry.second.expired(); });  // sets never created
    head_starts_[set_store.get()] = head;
    return head;
  }

  // Sleeps on this member's doorbell, which each member rings as it
  // attaches (announce()).
  bool await_arrival(const std::shared_ptr<void>& head_start, milliseconds within) const override {
    const auto* head = static_cast<const HeadStart*>(head_start.get());
    if (!head || !((head->made && head->ok) || head->opened)) return false;
    return shm::member_bell(head->segment, head->rank)
        .wait([&] { return everyone_attached(head->segment); }, [] {}, std::chrono::steady_clock::now() + within,
              std::chrono::nanoseconds(0));
  }

  using BackendFactory::create;
  std::unique_ptr<Backend> create(const std::vector<int>& global_ranks, int my_global_rank,
                                  std::shared_ptr<Store> set_store, milliseconds timeout,
                                  const std::atomic<bool>& cancelled) override {
    const int rank = set_rank_of(global_ranks, my_global_rank);
    if (options_.world_size > 0 && global_ranks.back() >= options_.world_size)
      throw InvalidArgument("backend: global rank " + std::to_string(global_ranks.back()) + " is not in the job's " +
                            std::to_string(options_.world_size) + " ranks");
    if (!set_store) throw InvalidArgument("shm backend: the set store is null");
    if (global_ranks.size() > 1) {
      const std::shared_ptr<HeadStart> head = take_head_start(*set_store);
      if (!head) publish_identity(global_ranks, rank, *set_store);
      const std::vector<std::string> identities = host_identities(global_ranks, rank, *set_store, timeout, cancelled);
      const hierarchical::HostLayout layout = hierarchical::plan_hosts(identities);
      if (layout.hosts.size() == 1) {
        if (auto backend = make_local(global_ranks, my_global_rank, *set_store, timeout, cancelled, head.get()))
          return backend;
      } else if (hierarchical::worth_composing(layout)) {
        return make_across_hosts(global_ranks, rank, layout, set_store, timeout, cancelled);
      }
    }
    return network_->create(global_ranks, my_global_rank, std::move(set_store), timeout, cancelled);
  }

 private:
  std::string get(Store& store, const std::string& key, milliseconds timeout, const std::atomic<bool>& cancelled,
                  const std::vector<int>& global_ranks) const {
    return text_of(get_unless_cancelled(store, key, timeout, cancelled, kCancelPoll,
                                        control::describe_set(global_ranks) + ": connecting shared memory"));
  }

  // This member's host identity; with the path off, one nobody else has.
  std::string my_identity(int global_rank) const {
    return options_.enabled ? host_identity_ : kOff + std::to_string(global_rank);
  }

  // Every member publishes its identity in the set's store (prepare() or
  // create() does), whether or not it needs the others'.
  void publish_identity(const std::vector<int>& global_ranks, int rank, Store& store) const {
    store.post("shm/host/" + std::to_string(rank), bytes_of(my_identity(global_ranks[rank])));
  }

  // Every member's host identity, by set rank; when a member has the path
  // off, one per member, so that nobody shares memory or composes hosts.
  // The others' are read from the set's store only when this process has
  // not learnt them in an earlier set: the global set teaches every rank's,
  // so later sets need no store round trip for them.
  std::vector<std::string> host_identities(const std::vector<int>& global_ranks, int rank, Store& store,
                                           milliseconds timeout, const std::atomic<bool>& cancelled) const {
    std::vector<std::string> identities = known_identities(global_ranks);
    if (identities.empty()) {
      for (size_t r = 0; r < global_ranks.size(); ++r) {
        identities.push_back(static_cast<int>(r) == rank
                                 ? my_identity(global_ranks[r])
                                 : get(store, "shm/host/" + std::to_string(r), timeout, cancelled, global_ranks));
      }
      learn_identities(global_ranks, identities);
    }
    const bool some_off = std::any_of(identities.begin(), identities.end(),
                                      [](const std::string& identity) { return identity.rfind(kOff, 0) == 0; });
    if (!some_off) return identities;
    for (size_t r = 0; r < global_ranks.size(); ++r) identities[r] = kOff + std::to_string(global_ranks[r]);
    return identities;
  }

  // The identities of `global_ranks` if every one is known, else none.
  std::vector<std::string> known_identities(const std::vector<int>& global_ranks) const {
    std::lock_guard<std::mutex> lock(identities_mutex_);
    std::vector<std::string> identities;
    for (int global_rank : global_ranks) {
      auto it = identities_.find(global_rank);
      if (it == identities_.end()) return {};
      identities.push_back(it->second);
    }
    return identities;
  }

  void learn_identities(const std::vector<int>& global_ranks, const std::vector<std::string>& identities) const {
    std::lock_guard<std::mutex> lock(identities_mutex_);
    for (size_t r = 0; r < global_ranks.size(); ++r) identities_.emplace(global_ranks[r], identities[r]);
  }

  // A ShmBackend over `global_ranks` (members of one host), or null when
  // the segment cannot be used.
  std::unique_ptr<Backend> make_local(const std::vector<int>& global_ranks, int my_global_rank, Store& store,
                                      milliseconds timeout, const std::atomic<bool>& cancelled,
                                      HeadStart* head = nullptr) const {
    const int rank = set_rank_of(global_ranks, my_global_rank);
    std::optional<Segment> segment = attach(global_ranks, rank, store, timeout, cancelled, head);
    if (!segment) return nullptr;
    return std::make_unique<shm::ShmBackend>(global_ranks, rank, std::move(*segment), timeout,
                                             tuning(global_ranks.size()));
  }

  // Shared memory inside each host (the network path on a host whose
  // segment cannot be used), the network factory between hosts and for
  // the control plane.
  std::unique_ptr<Backend> make_across_hosts(const std::vector<int>& global_ranks, int rank,
                                             hierarchical::HostLayout layout, const std::shared_ptr<Store>& set_store,
                                             milliseconds timeout, const std::atomic<bool>& cancelled) const {
    auto network = [&](const std::vector<int>& ranks, int me, std::shared_ptr<Store> store) {
      return network_->create(ranks, me, std::move(store), timeout, cancelled);
    };
    auto local = [&](const std::vector<int>& ranks, int me, std::shared_ptr<Store> store) {
      if (auto backend = make_local(ranks, me, *store, timeout, cancelled)) return backend;
      return network(ranks, me, std::move(store));
    };
    return hierarchical::make_hierarchical_backend(global_ranks, rank, std::move(layout), set_store, local, network);
  }

  // Set rank 0 makes the segment (make_segment); the others map it and
  // publish whether they could. Once every outcome is known the name is
  // unlinked by everyone (any survivor removes it). Nullopt: the network
  // path, announced by one warning from set rank 0.
  std::optional<Segment> attach(const std::vector<int>& global_ranks, int rank, Store& store, milliseconds timeout,
                                const std::atomic<bool>& cancelled, HeadStart* head) const {
    const std::string set_name = control::describe_set(global_ranks);
    const auto ranks = static_cast<uint32_t>(global_ranks.size());
    Segment segment;
    NameGuard guard;
    if (rank == 0) {
      if (head && head->made) {
        if (!head->ok) return std::nullopt;
        segment = std::move(head->segment);
        guard.name = std::exchange(head->guard.name, "");
      } else if (!make_segment(ranks, store, guard, segment, set_name)) {
        return std::nullopt;
      }
    } else if (head && head->opened) {
      segment = std::move(head->segment);
      guard.name = std::exchange(head->guard.name, "");
    } else {
      // "ok <name> <bytes>" once made (the name is in kSegmentKey too, for
      // cleaning up after a set rank 0 that dies while making it).
      const std::string ready = get(store, kReadyKey, timeout, cancelled, global_ranks);
      if (ready.rfind("ok ", 0) != 0) return std::nullopt;
      try {
        segment = open_made(ready, ranks, rank, guard);
      } catch (const std::exception& e) {
        // The others see that this member never attaches and read why here.
        store.set(refusal_key(rank), bytes_of(e.what()));
        return std::nullopt;
      }
    }
    if (all_attached(segment, cancelled)) return segment;
    std::string refusals;
    for (size_t r = 1; r < ranks; ++r) {
      if (static_cast<int>(r) == rank) continue;
      if (std::optional<std::string> refusal = refusal_of(segment, static_cast<int>(r), store, timeout, cancelled,
                                                          global_ranks))
        refusals += "; global rank " + std::to_string(global_ranks[r]) + ": " + *refusal;
    }
    if (refusals.empty()) return segment;
    if (rank == 0)
      log_warning(set_name + ": a member could not use the shared-memory segment" + refusals + "; using the " +
                  network_->name() + " path");
    return std::nullopt;
  }

  // A member other than set rank 0 whose set store already holds the
  // segment's record (no round trip) maps it and marks itself attached.
  // Anything amiss is left for create(), which tries again and tells the
  // others why it refuses.
  static void open_ahead(HeadStart& head, uint32_t ranks, int rank, Store& store) {
    const std::optional<std::vector<uint8_t>> held = store.held(kReadyKey);
    if (!held || text_of(*held).rfind("ok ", 0) != 0) return;
    try {
      head.segment = open_made(text_of(*held), ranks, rank, head.guard);
      head.opened = true;
    } catch (const std::exception&) {
      head.guard.name.clear();  // create() opens it again, and says why it refuses
    }
  }

  // Maps the segment that set rank 0's record "ok <name> <bytes>" names
  // (its name goes to `guard`) and marks `rank` attached.
  static Segment open_made(const std::string& ready, uint32_t ranks, int rank, NameGuard& guard) {
    const shm::SegmentRecord record = shm::parse_segment_record(ready);
    guard.name = record.name;
    Segment segment = Segment::open(record.name, ranks, record.total_bytes);
    announce(segment, rank);
    return segment;
  }

  // What prepare() did for the set whose store is `store`, if it ran.
  std::shared_ptr<HeadStart> take_head_start(const Store& store) const {
    std::lock_guard<std::mutex> lock(identities_mutex_);
    auto it = head_starts_.find(&store);
    if (it == head_starts_.end()) return nullptr;
    std::shared_ptr<HeadStart> head = it->second.lock();
    head_starts_.erase(it);
    return head;
  }

  // Publishes the segment's name and size before making it, so that the
  // members can remove the name even if this process dies right after
  // making it; then makes it and publishes whether that worked. False (with
  // one warning): no segment.
  bool make_segment(uint32_t ranks, Store& store, NameGuard& guard, Segment& segment, const std::string& set_name) const {
    std::string problem;
    SegmentLayout layout;
    try {
      layout = shm::plan_layout(ranks, options_.slot_bytes ? options_.slot_bytes : kDefaultSlotBytes, kRingBytes);
      guard.name = shm::random_segment_name();
    } catch (const Error& e) {
      problem = e.what();
    }
    store.post(kSegmentKey, bytes_of(problem.empty() ? guard.name + " " + std::to_string(layout.total_bytes) : "-" + problem));
    if (problem.empty()) {
      try {
        segment = Segment::create(guard.name, layout);
        announce(segment, 0);
      } catch (const Error& e) {
        guard.name.clear();  // create() removed what it made, if anything
        problem = e.what();
      }
      store.post(kReadyKey, bytes_of(problem.empty() ? shm::format_segment_record({guard.name, layout.total_bytes})
                                                    : "-" + problem));
    }
    if (problem.empty()) return true;
    log_warning(set_name + ": no shared-memory segment (" + problem + "); using the " + network_->name() + " path");
    return false;
  }

  // Whether every member marks itself attached in the segment within a
  // short wait (the common case: no store round trip at all).
  static bool all_attached(const Segment& segment, const std::atomic<bool>& cancelled) {
    const auto give_up = std::chrono::steady_clock::now() + milliseconds(50);
    for (;;) {
      if (everyone_attached(segment)) return true;
      if (cancelled || std::chrono::steady_clock::now() >= give_up) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  static bool everyone_attached(const Segment& segment) {
    for (uint32_t r = 0; r < segment.layout().ranks; ++r)
      if (!has_attached(segment, static_cast<int>(r))) return false;
    return true;
  }

  // Whether `member` attached, even if it has left since: a member that
  // made its set, had nothing to do and shut down before this one looked
  // did attach (the set then sees it gone at the first op), and waiting for
  // it to attach again would hold this member's init for the whole timeout.
  static bool has_attached(const Segment& segment, int member) {
    const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(member));
    return std::atomic_ref<uint32_t>(*segment.field_at<uint32_t>(area + shm::field::kState))
               .load(std::memory_order_acquire) != shm::kAbsent;
  }

  static std::string refusal_key(int member) { return "shm/refused/" + std::to_string(member); }

  // Set rank `member`'s outcome once it has one: nullopt when it attached
  // (seen in the segment), else why it refused the segment (published in
  // the store). A member that does neither within the timeout is a Timeout.
  std::optional<std::string> refusal_of(const Segment& segment, int member, Store& store, milliseconds timeout,
                                        const std::atomic<bool>& cancelled,
                                        const std::vector<int>& global_ranks) const {
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (has_attached(segment, member)) return std::nullopt;
      try {
        const std::vector<uint8_t> refusal = store.get(refusal_key(member), milliseconds(10));
        return text_of(refusal);
      } catch (const Timeout&) {
      }
      if (cancelled)
        throw InvalidArgument(control::describe_set(global_ranks) + ": cancelled while connecting shared memory");
      if (std::chrono::steady_clock::now() >= give_up)
        throw Timeout(control::describe_set(global_ranks) + ": connecting shared memory: global rank " +
                      std::to_string(global_ranks[member]) + " neither attached the segment nor refused it within " +
                      std::to_string(timeout.count()) + " ms");
    }
  }

  // Publishes this member's pid, marks it attached and rings the others'
  // doorbells (a member may be asleep in await_arrival()).
  static void announce(Segment& segment, int rank) {
    const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(rank));
    std::atomic_ref<int32_t>(*segment.field_at<int32_t>(area + shm::field::kPid)).store(getpid(), std::memory_order_release);
    std::atomic_ref<uint32_t>(*segment.field_at<uint32_t>(area + shm::field::kState))
        .store(shm::kAttached, std::memory_order_release);
    for (int r = 0; r < static_cast<int>(segment.layout().ranks); ++r)
      if (r != rank) shm::member_bell(segment, r).ring();
  }

  shm::ShmTuning tuning(size_t members) const {
    shm::ShmTuning tuning;
    // The host's CPUs, not this process's affinity: a launcher that binds
    // each rank to a core of its own (mpirun does) leaves one CPU in the
    // mask while the members still run side by side. Read once.
    static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    // More members (or ranks of the job on this host) than cores: a
    // spinning waiter takes the core its peer needs.
    const size_t busy = std::max(members, static_cast<size_t>(std::max(options_.host_ranks, 0)));
    if (cpus > 0 && busy > static_cast<size_t>(cpus)) tuning.spin = tuning.spin_engine = std::chrono::microseconds(2);
    return tuning;
  }

  const std::unique_ptr<BackendFactory> network_;
  const ShmOptions options_;
  const std::string host_identity_;
  mutable std::mutex identities_mutex_;  // guards identities_ and head_starts_
  mutable std::map<int, std::string> identities_;  // by global rank
  mutable std::map<const Store*, std::weak_ptr<HeadStart>> head_starts_;  // by set store
};

}  // namespace

std::unique_ptr<BackendFactory> make_shm_backend_factory(std::unique_ptr<BackendFactory> network, ShmOptions options) {
  return std::make_unique<ShmBackendFactory>(std::move(network), std::move(options));
}

}  // namespace hora
