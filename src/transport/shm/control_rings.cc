// The control rings of a shared-memory set (control_rings.h).
#include "transport/shm/control_rings.h"

#include "hora/errors.h"
#include "transport/shm/attachment.h"
#include "transport/shm/ring.h"

namespace hora::shm {
namespace {

std::atomic_ref<uint64_t> counter(uint8_t* ring, uint64_t offset) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(ring + offset));
}

}  // namespace

ControlRings::ControlRings(Attachment& member) : member_(member), inboxes_(member.global_ranks.size()) {
  const int rank = member_.rank;
  for (int r = 0; r < member_.size(); ++r) {
    send_mutexes_.push_back(std::make_unique<std::mutex>());
    if (r != rank && (rank == 0 || r == 0)) inboxes_[r].peer = r;
  }
}

uint8_t* ControlRings::ring(int member, bool upward) const {
  return member_.segment.at(member_.segment.layout().ring_offset(static_cast<uint32_t>(member), upward));
}

void ControlRings::write_frame(int to, const std::vector<uint8_t>& bytes) {
  std::lock_guard<std::mutex> lock(*send_mutexes_[to]);
  if (member_.member_departed(to))
    throw PeerFailure(member_.set_name + ": the control connection to global rank " +
                      std::to_string(member_.global_ranks[to]) + " is closed");
  const std::array<uint8_t, 4> header = net::frame_header(bytes.size());
  const auto until = member_.deadline();
  write_to_ring(to, header.data(), header.size(), until);
  write_to_ring(to, bytes.data(), bytes.size(), until);
}

// Called with the link's send mutex held: this thread is the ring's only
// writer. Waits for space while the ring is full.
void ControlRings::write_to_ring(int to, const uint8_t* bytes, size_t size, Clock::time_point deadline) {
  const int rank = member_.rank;
  uint8_t* base = ring(rank == 0 ? to : rank, rank != 0);
  const uint64_t capacity = member_.segment.layout().ring_bytes;
  const std::string peer = "global rank " + std::to_string(member_.global_ranks[to]);
  while (size > 0) {
    const uint64_t tail = counter(base, field::kRingTail).load(std::memory_order_acquire);
    const std::optional<uint64_t> written = write_ring(base, capacity, bytes, size);
    if (!written) throw PeerFailure(member_.set_name + ": the control ring to " + peer + " is corrupt");
    if (*written == 0) {
      // The reader may be inside a collective, where only its data
      // doorbell wakes it; it drains its rings between waits there.
      member_.data_bells[to].ring();
      auto drained = [&] { return counter(base, field::kRingTail).load(std::memory_order_acquire) != tail; };
      auto idle = [&] {
        if (member_.member_departed(to) || member_.peers.exited(to))
          throw PeerFailure(member_.set_name + ": the control connection to " + peer + " closed");
        drain_if_reader();
      };
      if (!member_.bells[rank].wait(drained, idle, deadline, member_.tuning.spin_engine))
        throw PeerFailure(member_.set_name + ": " + peer + " read no control message for " +
                          std::to_string(member_.timeout.count()) + " ms");
      continue;
    }
    member_.bells[to].ring();
    bytes += *written;
    size -= *written;
  }
}

void ControlRings::drain_if_reader() {
  std::unique_lock<std::mutex> lock(inbox_mutex_, std::try_to_lock);
  if (lock.owns_lock()) drain_inboxes(false);
}

// Called with inbox_mutex_ held. A link whose peer left or exited is
// drained one last time and then closed: every frame sent before that
// arrives first.
void ControlRings::drain_inboxes(bool check_liveness) {
  for (Inbox& inbox : inboxes_) {
    if (inbox.peer < 0 || inbox.closed) continue;
    const bool gone = member_.member_departed(inbox.peer) || (check_liveness && member_.peers.exited(inbox.peer));
    drain(inbox, member_.rank == 0);
    if (gone) inbox.closed = true;
  }
}

void ControlRings::drain(Inbox& inbox, bool upward_ring) {
  uint8_t* base = ring(upward_ring ? inbox.peer : member_.rank, upward_ring);
  ring_bytes_.clear();
  const std::optional<uint64_t> moved = read_ring(base, member_.segment.layout().ring_bytes, ring_bytes_);
  if (!moved) {  // a peer that breaks the ring is treated as gone
    inbox.closed = true;
    return;
  }
  if (*moved == 0) return;
  inbox.frames.append(ring_bytes_);
  member_.bells[inbox.peer].ring();
}

bool ControlRings::pending() const {
  for (const Inbox& inbox : inboxes_) {
    if (inbox.peer < 0 || inbox.closed) continue;
    const bool upward = member_.rank == 0;
    if (ring_has_data(ring(upward ? inbox.peer : member_.rank, upward)) || member_.member_departed(inbox.peer))
      return true;
  }
  return false;
}

bool ControlRings::drained() const {
  for (const Inbox& inbox : inboxes_)
    if (inbox.peer >= 0 && (inbox.frames.ready() || (inbox.closed && !inbox.closure_reported))) return true;
  return false;
}

std::optional<RingMessage> ControlRings::next(bool check_liveness) {
  drain_inboxes(check_liveness);
  return pop_frame();
}

std::optional<RingMessage> ControlRings::pop_frame() {
  for (size_t n = 0; n < inboxes_.size(); ++n) {
    const size_t index = (next_inbox_ + n) % inboxes_.size();
    Inbox& inbox = inboxes_[index];
    if (inbox.peer < 0) continue;
    if (std::optional<std::vector<uint8_t>> frame = inbox.frames.pop()) {
      next_inbox_ = index + 1;
      return RingMessage{inbox.peer, std::move(*frame)};
    }
    if (inbox.frames.broken()) inbox.closed = true;  // a peer that breaks the framing is treated as gone
    if (inbox.closed && !inbox.closure_reported) {
      inbox.closure_reported = true;
      next_inbox_ = index + 1;
      return RingMessage{inbox.peer, {}, true};
    }
  }
  return std::nullopt;
}

}  // namespace hora::shm
