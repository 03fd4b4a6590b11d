// Making and mapping a set's segment (segment_setup.h).
#include "transport/shm/segment_setup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "hora/errors.h"
#include "store/cancellable_wait.h"
#include "transport/backend.h"
#include "util/caller_waits.h"
#include "util/log.h"

namespace hora::shm {
namespace {

using std::chrono::milliseconds;

constexpr size_t kDefaultSlotBytes = size_t{1} << 20;
constexpr uint64_t kRingBytes = uint64_t{1} << 14;
constexpr char kSegmentKey[] = "shm/segment";  // "<name> <bytes>", or "-<why there is none>"
constexpr char kReadyKey[] = "shm/ready";      // "ok <name> <bytes>" once made, or "-<why not>"

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

std::string get(Store& store, const std::string& key, milliseconds timeout, const std::atomic<bool>& cancelled,
                const std::vector<int>& global_ranks) {
  return text_of(get_unless_cancelled(store, key, timeout, cancelled, kCancelPoll,
                                      describe_set(global_ranks) + ": connecting shared memory"));
}

// Whether `member` attached, even if it has left since: a member that
// made its set, had nothing to do and shut down before this one looked
// did attach (the set then sees it gone at the first op), and waiting for
// it to attach again would hold this member's init for the whole timeout.
bool has_attached(const Segment& segment, int member) {
  const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(member));
  return std::atomic_ref<uint32_t>(*segment.field_at<uint32_t>(area + field::kState))
             .load(std::memory_order_acquire) != kAbsent;
}

bool everyone_attached(const Segment& segment) {
  for (uint32_t r = 0; r < segment.layout().ranks; ++r)
    if (!has_attached(segment, static_cast<int>(r))) return false;
  return true;
}

// Whether every member marks itself attached in the segment within a
// short wait (the common case: no store round trip at all).
bool all_attached(const Segment& segment, const std::atomic<bool>& cancelled) {
  const auto give_up = std::chrono::steady_clock::now() + milliseconds(50);
  for (;;) {
    if (everyone_attached(segment)) return true;
    if (cancelled || std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// Publishes this member's pid, marks it attached and rings the others'
// doorbells (a member may be asleep in await_arrival()).
void announce(Segment& segment, int rank) {
  const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(rank));
  std::atomic_ref<int32_t>(*segment.field_at<int32_t>(area + field::kPid)).store(getpid(), std::memory_order_release);
  std::atomic_ref<uint32_t>(*segment.field_at<uint32_t>(area + field::kState)).store(kAttached, std::memory_order_release);
  for (int r = 0; r < static_cast<int>(segment.layout().ranks); ++r)
    if (r != rank) member_bell(segment, r).ring();
}

// Maps the segment that set rank 0's record "ok <name> <bytes>" names
// (its name goes to `guard`) and marks `rank` attached.
Segment open_made(const std::string& ready, uint32_t ranks, int rank, NameGuard& guard) {
  const SegmentRecord record = parse_segment_record(ready);
  guard.name = record.name;
  Segment segment = Segment::open(record.name, ranks, record.total_bytes);
  announce(segment, rank);
  return segment;
}

// A member other than set rank 0 whose set store already holds the
// segment's record (no round trip) maps it and marks itself attached.
// Anything amiss is left for attach(), which tries again and tells the
// others why it refuses.
void open_ahead(HeadStart& head, uint32_t ranks, int rank, Store& store) {
  const std::optional<std::vector<uint8_t>> held = store.held(kReadyKey);
  if (!held || text_of(*held).rfind("ok ", 0) != 0) return;
  try {
    head.segment = open_made(text_of(*held), ranks, rank, head.guard);
    head.opened = true;
  } catch (const std::exception&) {
    head.guard.name.clear();  // attach() opens it again, and says why it refuses
  }
}

std::string refusal_key(int member) { return "shm/refused/" + std::to_string(member); }

}  // namespace

NameGuard::~NameGuard() {
  if (!name.empty()) unlink_segment(name);
}

HeadStart::~HeadStart() {
  if (segment.mapped()) mark_departed(segment, rank);
}

SegmentSetup::SegmentSetup(size_t slot_bytes, std::string fallback)
    : slot_bytes_(slot_bytes ? slot_bytes : kDefaultSlotBytes), fallback_(std::move(fallback)) {}

std::shared_ptr<HeadStart> SegmentSetup::prepare(const std::vector<int>& global_ranks, int rank, Store& store) const {
  auto head = std::make_shared<HeadStart>();
  head->rank = rank;
  if (rank == 0) {
    head->made = true;
    head->ok = make_segment(static_cast<uint32_t>(global_ranks.size()), store, head->guard, head->segment,
                            describe_set(global_ranks));
  } else {
    open_ahead(*head, static_cast<uint32_t>(global_ranks.size()), rank, store);
  }
  return head;
}

// Sleeps on this member's doorbell, which each member rings as it
// attaches (announce()).
bool SegmentSetup::await_arrival(const HeadStart* head, milliseconds within) const {
  if (!head || !((head->made && head->ok) || head->opened)) return false;
  return member_bell(head->segment, head->rank)
      .wait([&] { return everyone_attached(head->segment); }, [] {}, std::chrono::steady_clock::now() + within,
            std::chrono::nanoseconds(0));
}

// Once every outcome is known the name is unlinked by everyone (any
// survivor removes it).
std::optional<Segment> SegmentSetup::attach(const std::vector<int>& global_ranks, int rank, Store& store,
                                            milliseconds timeout, const std::atomic<bool>& cancelled,
                                            HeadStart* head) const {
  const std::string set_name = describe_set(global_ranks);
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
    if (std::optional<std::string> refusal =
            refusal_of(segment, static_cast<int>(r), store, timeout, cancelled, global_ranks))
      refusals += "; global rank " + std::to_string(global_ranks[r]) + ": " + *refusal;
  }
  if (refusals.empty()) return segment;
  if (rank == 0)
    log_warning(set_name + ": a member could not use the shared-memory segment" + refusals + "; using the " +
                fallback_ + " path");
  return std::nullopt;
}

// Publishes the segment's name and size before making it, so that the
// members can remove the name even if this process dies right after
// making it; then makes it and publishes whether that worked. False (with
// one warning): no segment.
bool SegmentSetup::make_segment(uint32_t ranks, Store& store, NameGuard& guard, Segment& segment,
                                const std::string& set_name) const {
  std::string problem;
  SegmentLayout layout;
  try {
    layout = plan_layout(ranks, slot_bytes_, kRingBytes);
    guard.name = random_segment_name();
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
    store.post(kReadyKey,
               bytes_of(problem.empty() ? format_segment_record({guard.name, layout.total_bytes}) : "-" + problem));
  }
  if (problem.empty()) return true;
  log_warning(set_name + ": no shared-memory segment (" + problem + "); using the " + fallback_ + " path");
  return false;
}

// Set rank `member`'s outcome once it has one: nullopt when it attached
// (seen in the segment), else why it refused the segment (published in
// the store). A member that does neither within the timeout is a Timeout.
std::optional<std::string> SegmentSetup::refusal_of(const Segment& segment, int member, Store& store,
                                                    milliseconds timeout, const std::atomic<bool>& cancelled,
                                                    const std::vector<int>& global_ranks) const {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (has_attached(segment, member)) return std::nullopt;
    try {
      const std::vector<uint8_t> refusal = store.get(refusal_key(member), milliseconds(10));
      return text_of(refusal);
    } catch (const Timeout&) {
    }
    if (cancelled) throw InvalidArgument(describe_set(global_ranks) + ": cancelled while connecting shared memory");
    if (std::chrono::steady_clock::now() >= give_up)
      throw Timeout(describe_set(global_ranks) + ": connecting shared memory: global rank " +
                    std::to_string(global_ranks[member]) + " neither attached the segment nor refused it within " +
                    std::to_string(timeout.count()) + " ms");
  }
}

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

std::string machine_of(const std::string& identity) { return identity.substr(0, identity.find('|')); }

ShmTuning tuning_for(size_t members, int machine_ranks) {
  ShmTuning tuning;
  // More members (or ranks of the job on this machine) than cores.
  const size_t busy = std::max(members, static_cast<size_t>(std::max(machine_ranks, 0)));
  if (more_than_cores(busy)) {
    tuning.spin = tuning.spin_engine = std::chrono::microseconds(2);
    tuning.yield_look = std::chrono::microseconds(200);
  }
  return tuning;
}

}  // namespace hora::shm
