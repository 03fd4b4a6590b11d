// The control plane of ShmBackend: a star of byte-stream rings between the
// coordinator (set rank 0) and each member, carrying [u32 length][bytes]
// frames (see shm_backend.h).
#include <cstring>

#include "hora/errors.h"
#include "transport/shm/shm_backend.h"

namespace hora::shm {
namespace {

constexpr size_t kMaxFrameBytes = size_t{1} << 30;

std::atomic_ref<uint64_t> counter(uint8_t* ring, uint64_t offset) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(ring + offset));
}

uint32_t get_u32(const uint8_t* in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= static_cast<uint32_t>(in[i]) << (8 * i);
  return value;
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
  uint8_t header[4];
  for (int i = 0; i < 4; ++i) header[i] = static_cast<uint8_t>(bytes.size() >> (8 * i));
  const auto until = deadline();
  write_to_ring(to, header, sizeof(header), until);
  write_to_ring(to, bytes.data(), bytes.size(), until);
}

// Called with the link's send mutex held: this thread is the ring's only
// writer. Waits for space while the ring is full.
void ShmBackend::write_to_ring(int to, const uint8_t* bytes, size_t size, Clock::time_point deadline) {
  uint8_t* base = ring(rank_ == 0 ? to : rank_, rank_ != 0);
  const uint64_t capacity = segment_.layout().ring_bytes;
  uint8_t* data = base + SegmentLayout::kRingHeaderBytes;
  uint64_t head = counter(base, field::kRingHead).load(std::memory_order_relaxed);
  const std::string peer = "global rank " + std::to_string(global_ranks_[to]);
  while (size > 0) {
    const uint64_t tail = counter(base, field::kRingTail).load(std::memory_order_acquire);
    if (head - tail > capacity) throw PeerFailure(set_name_ + ": the control ring to " + peer + " is corrupt");
    const uint64_t space = capacity - (head - tail);
    if (space == 0) {
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
    const uint64_t n = std::min<uint64_t>(space, size);
    const uint64_t position = head % capacity;
    const uint64_t first = std::min(n, capacity - position);
    std::memcpy(data + position, bytes, first);
    std::memcpy(data, bytes + first, n - first);
    head += n;
    counter(base, field::kRingHead).store(head, std::memory_order_release);
    bells_[to].ring();
    bytes += n;
    size -= n;
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
  const uint64_t capacity = segment_.layout().ring_bytes;
  const uint64_t head = counter(base, field::kRingHead).load(std::memory_order_acquire);
  const uint64_t tail = counter(base, field::kRingTail).load(std::memory_order_relaxed);
  if (head == tail) return;
  if (head - tail > capacity) {  // a peer that breaks the ring is treated as gone
    inbox.closed = true;
    return;
  }
  const uint8_t* data = base + SegmentLayout::kRingHeaderBytes;
  const uint64_t n = head - tail;
  const uint64_t position = tail % capacity;
  const uint64_t first = std::min(n, capacity - position);
  inbox.received.insert(inbox.received.end(), data + position, data + position + first);
  inbox.received.insert(inbox.received.end(), data, data + (n - first));
  counter(base, field::kRingTail).store(head, std::memory_order_release);
  bells_[inbox.peer].ring();
}

bool ShmBackend::control_pending() const {
  for (const Inbox& inbox : inboxes_) {
    if (inbox.peer < 0 || inbox.closed) continue;
    const bool upward = rank_ == 0;
    uint8_t* base = ring(upward ? inbox.peer : rank_, upward);
    if (counter(base, field::kRingHead).load(std::memory_order_acquire) !=
            counter(base, field::kRingTail).load(std::memory_order_relaxed) ||
        member_departed(inbox.peer))
      return true;
  }
  return false;
}

std::optional<ControlMessage> ShmBackend::pop_frame() {
  for (size_t n = 0; n < inboxes_.size(); ++n) {
    const size_t index = (next_inbox_ + n) % inboxes_.size();
    Inbox& inbox = inboxes_[index];
    if (inbox.peer < 0) continue;
    auto& buf = inbox.received;
    if (buf.size() >= 4) {
      const size_t length = get_u32(buf.data());
      if (length > kMaxFrameBytes) {  // a peer that breaks the framing is treated as gone
        buf.clear();
        inbox.closed = true;
      } else if (buf.size() >= 4 + length) {
        ControlMessage message{inbox.peer, std::vector<uint8_t>(buf.begin() + 4, buf.begin() + 4 + length)};
        buf.erase(buf.begin(), buf.begin() + 4 + length);
        next_inbox_ = index + 1;
        return message;
      }
    }
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
