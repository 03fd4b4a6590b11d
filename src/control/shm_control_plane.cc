#include "control/shm_control_plane.h"

#include "hora/errors.h"
#include "net/frames.h"
#include "util/caller_waits.h"

namespace hora::control {

ShmControlPlane::ShmControlPlane(std::shared_ptr<shm::Attachment> member) : member_(std::move(member)) {}

void ShmControlPlane::send(int to, const std::vector<uint8_t>& bytes) {
  const int rank = member_->rank;
  const bool star = rank == 0 ? (to > 0 && to < member_->size()) : to == 0;
  if (!star)
    throw InvalidArgument(member_->set_name + ": set rank " + std::to_string(rank) +
                          " cannot send a control message to set rank " + std::to_string(to));
  if (bytes.size() > net::kMaxFrameBytes)
    throw InvalidArgument(member_->set_name + ": control message of " + std::to_string(bytes.size()) +
                          " bytes is too large");
  member_->rings.write_frame(to, bytes);
}

// Looks at the peers' processes once per kLivenessInterval (a pidfd poll
// each), and otherwise only at the rings.
std::optional<ControlMessage> ShmControlPlane::receive(Clock::time_point deadline) {
  shm::ControlRings& rings = member_->rings;
  shm::FastLane* lane = member_->lane ? &*member_->lane : nullptr;
  std::lock_guard<std::mutex> lock(rings.reader_mutex());
  for (;;) {
    const auto now = Clock::now();
    const bool check_liveness = now.time_since_epoch().count() >= next_liveness_check_.load();
    if (check_liveness) next_liveness_check_ = (now + shm::kLivenessInterval).time_since_epoch().count();
    if (std::optional<shm::RingMessage> message = rings.next(check_liveness))
      return ControlMessage{message->from, std::move(message->bytes), message->closed, {}, {}};
    if (wake_pending_.exchange(false, std::memory_order_acq_rel)) return std::nullopt;
    if (lane && lane->engine_attention()) return std::nullopt;
    if (now >= deadline) return std::nullopt;
    auto ready = [&] { return this->ready(); };
    const auto round_end = deadline - now < shm::kLivenessInterval ? deadline : now + shm::kLivenessInterval;
    member_->bells[member_->rank].wait(ready, [] {}, round_end, member_->tuning.spin_engine);
  }
}

bool ShmControlPlane::ready() const {
  const shm::ControlRings& rings = member_->rings;
  return rings.pending() || rings.drained() || wake_pending_.load(std::memory_order_acquire) ||
         (member_->lane && member_->lane->engine_attention());
}

// Under the reader mutex: a collective that drains the rings meanwhile
// takes it too, so a frame is either still in a ring, or drained already
// (ready()), or written after the doorbell's word was read (it moves).
std::optional<ControlPlane::Armed> ShmControlPlane::arm() {
  std::lock_guard<std::mutex> lock(member_->rings.reader_mutex());
  std::optional<FutexWait> wait = member_->bells[member_->rank].arm([&] { return ready(); });
  if (!wait) return std::nullopt;
  return Armed{*wait, {}, Clock::time_point(Clock::duration(next_liveness_check_.load()))};
}

// Spins as receive() does before it sleeps, holding the reader mutex as it
// does (a collective meanwhile leaves the rings to this thread).
bool ShmControlPlane::await_briefly() {
  const std::chrono::nanoseconds spin = member_->tuning.spin_engine;
  if (spin.count() <= 0) return false;
  std::lock_guard<std::mutex> lock(member_->rings.reader_mutex());
  const auto start = Clock::now();
  const auto until = start + spin, unwatched_until = start + kUnwatchedSpin;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if ((i & 31) != 31) continue;
    const auto now = Clock::now();
    if (now >= until || (now >= unwatched_until && !caller_waiting())) return false;
  }
}

void ShmControlPlane::disarm() { member_->bells[member_->rank].disarm(); }

void ShmControlPlane::wake() {
  wake_pending_.store(true, std::memory_order_release);
  member_->bells[member_->rank].ring();
}

}  // namespace hora::control
