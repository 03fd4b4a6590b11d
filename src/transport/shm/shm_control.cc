// The control plane of ShmBackend: a star of byte-stream rings between the
// coordinator (set rank 0) and each member, carrying [u32 length][bytes]
// frames (see shm_backend.h, net/frames.h and ring.h).
#include "hora/errors.h"
#include "net/frames.h"
#include "transport/shm/ring.h"
#include "transport/shm/shm_backend.h"

namespace hora::shm {
namespace {

using net::kMaxFrameBytes;

std::atomic_ref<uint64_t> counter(uint8_t* ring, uint64_t offset) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(ring + offset));
}

}  // namespace

uint8_t* ShmBackend::ring(int member, bool upward) const {
  return segment_.at(segment_.layout().ring_offset(static_cast<uint32_t>(member), upward));
}

void ShmBackend::send_control(int to, const std::vector<uint8_t>& bytes) {
  const bool star = rank_ == 0 ? (to > 0 && to < size()) : to == 0;
  if (!star)
    throw InvalidArgument(set_name_ + ": set rank " + std::to_string(rank_) +
                          " cannot send a control message to set rank " + std::to_string(to));
  if (bytes.size() > kMaxFrameBytes)
    throw InvalidArgument(set_name_ + ": control message of " + std::to_string(bytes.size()) + " bytes is too large");
  std::lock_guard<std::mutex> lock(*send_mutexes_[to]);
  if (member_departed(to))
    throw PeerFailure(set_name_ + ": the control connection to global rank " + std::to_string(global_ranks_[to]) +
                      " is closed");
  const std::array<uint8_t, 4> header = net::frame_header(bytes.size());
  const auto until = deadline();
  write_to_ring(to, header.data(), header.size(), until);
  write_to_ring(to, bytes.data(), bytes.size(), until);
}

// Called with the link's send mutex held: this thread is the ring's only
// writer. Waits for space while the ring is full.
void ShmBackend::write_to_ring(int to, const uint8_t* bytes, size_t size, Clock::time_point deadline) {
  uint8_t* base = ring(rank_ == 0 ? to : rank_, rank_ != 0);
  const uint64_t capacity = segment_.layout().ring_bytes;
  const std::string peer = "global rank " + std::to_string(global_ranks_[to]);
  while (size > 0) {
    const uint64_t tail = counter(base, field::kRingTail).load(std::memory_order_acquire);
    const std::optional<uint64_t> written = write_ring(base, capacity, bytes, size);
    if (!written) throw PeerFailure(set_name_ + ": the control ring to " + peer + " is corrupt");
    if (*written == 0) {
      // The reader may be inside a collective, where only its data
      // doorbell wakes it; it drains its rings between waits there.
      data_bells_[to].ring();
      auto drained = [&] { return counter(base, field::kRingTail).load(std::memory_order_acquire) != tail; };
      auto idle = [&] {
        if (member_departed(to) || peers_.exited(to))
          throw PeerFailure(set_name_ + ": the control connection to " + peer + " closed");
        drain_if_reader();
      };
      if (!bells_[rank_].wait(drained, idle, deadline, tuning_.spin_engine))
        throw PeerFailure(set_name_ + ": " + peer + " read no control message for " + std::to_string(timeout_.count()) + " ms");
      continue;
    }
    bells_[to].ring();
    bytes += *written;
    size -= *written;
  }
}

void ShmBackend::drain_if_reader() {
  std::unique_lock<std::mutex> lock(inbox_mutex_, std::try_to_lock);
  if (lock.owns_lock()) drain_inboxes(false);
}

// Called with inbox_mutex_ held. A link whose peer left or exited is
// drained one last time and then closed: every frame sent before that
// arrives first.
void ShmBackend::drain_inboxes(bool check_liveness) {
  for (Inbox& inbox : inboxes_) {
    if (inbox.peer < 0 || inbox.closed) continue;
    const bool gone = member_departed(inbox.peer) || (check_liveness && peers_.exited(inbox.peer));
    drain(inbox, rank_ == 0);
    if (gone) inbox.closed = true;
  }
}

void ShmBackend::drain(Inbox& inbox, bool upward_ring) {
  uint8_t* base = ring(upward_ring ? inbox.peer : rank_, upward_ring);
  ring_bytes_.clear();
  const std::optional<uint64_t> moved = read_ring(base, segment_.layout().ring_bytes, ring_bytes_);
  if (!moved) {  // a peer that breaks the ring is treated as gone
    inbox.closed = true;
    return;
  }
  if (*moved == 0) return;
  inbox.frames.append(ring_bytes_);
  bells_[inbox.peer].ring();
}

bool ShmBackend::control_pending() const {
  for (const Inbox& inbox : inboxes_) {
    if (inbox.peer < 0 || inbox.closed) continue;
    const bool upward = rank_ == 0;
    if (ring_has_data(ring(upward ? inbox.peer : rank_, upward)) || member_departed(inbox.peer)) return true;
  }
  return false;
}

std::optional<ControlMessage> ShmBackend::pop_frame() {
  for (size_t n = 0; n < inboxes_.size(); ++n) {
    const size_t index = (next_inbox_ + n) % inboxes_.size();
    Inbox& inbox = inboxes_[index];
    if (inbox.peer < 0) continue;
    if (std::optional<std::vector<uint8_t>> frame = inbox.frames.pop()) {
      next_inbox_ = index + 1;
      return ControlMessage{inbox.peer, std::move(*frame)};
    }
    if (inbox.frames.broken()) inbox.closed = true;  // a peer that breaks the framing is treated as gone
    if (inbox.closed && !inbox.closure_reported) {
      inbox.closure_reported = true;
      next_inbox_ = index + 1;
      return ControlMessage{inbox.peer, {}, true};
    }
  }
  return std::nullopt;
}

std::optional<ControlMessage> ShmBackend::receive_control(Clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  for (;;) {
    const auto now = Clock::now();
    const bool check_liveness = now >= next_control_liveness_check_;
    if (check_liveness) next_control_liveness_check_ = now + kLivenessInterval;
    drain_inboxes(check_liveness);
    if (auto message = pop_frame()) return message;
    if (wake_pending_.exchange(false, std::memory_order_acq_rel)) return std::nullopt;
    if (lane_ && lane_->engine_attention()) return std::nullopt;
    if (now >= deadline) return std::nullopt;
    auto ready = [&] {
      return control_pending() || wake_pending_.load(std::memory_order_acquire) || (lane_ && lane_->engine_attention());
    };
    const auto round_end = deadline - now < kLivenessInterval ? deadline : now + kLivenessInterval;
    bells_[rank_].wait(ready, [] {}, round_end, tuning_.spin_engine);
  }
}

void ShmBackend::wake() {
  wake_pending_.store(true, std::memory_order_release);
  bells_[rank_].ring();
}

}  // namespace hora::shm
