#include "control/shm_control_plane.h"

#include "hora/errors.h"
#include "net/frames.h"

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
    const bool check_liveness = now >= next_liveness_check_;
    if (check_liveness) next_liveness_check_ = now + shm::kLivenessInterval;
    if (std::optional<shm::RingMessage> message = rings.next(check_liveness))
      return ControlMessage{message->from, std::move(message->bytes), message->closed};
    if (wake_pending_.exchange(false, std::memory_order_acq_rel)) return std::nullopt;
    if (lane && lane->engine_attention()) return std::nullopt;
    if (now >= deadline) return std::nullopt;
    auto ready = [&] {
      return rings.pending() || wake_pending_.load(std::memory_order_acquire) || (lane && lane->engine_attention());
    };
    const auto round_end = deadline - now < shm::kLivenessInterval ? deadline : now + shm::kLivenessInterval;
    member_->bells[member_->rank].wait(ready, [] {}, round_end, member_->tuning.spin_engine);
  }
}

void ShmControlPlane::wake() {
  wake_pending_.store(true, std::memory_order_release);
  member_->bells[member_->rank].ring();
}

}  // namespace hora::control
