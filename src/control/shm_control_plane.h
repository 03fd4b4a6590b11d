// The control plane of a process set whose members share a host: the
// byte rings in the set's shared-memory segment (transport/shm/
// control_rings.h), no socket.
#pragma once

#include <atomic>
#include <memory>

#include "control/control_plane.h"
#include "transport/shm/attachment.h"

namespace hora::control {

// Threading is as ControlPlane states. receive() drains the rings, then
// sleeps on this member's doorbell, which a sender rings; it also returns
// early (nullopt) when the set's fast lane needs the engine thread. Holds
// the member's attachment with its ShmBackend: the member departs, and
// its peers see its links close, when both are gone.
class ShmControlPlane final : public ControlPlane {
 public:
  explicit ShmControlPlane(std::shared_ptr<shm::Attachment> member);

  void send(int to, const std::vector<uint8_t>& bytes) override;
  std::optional<ControlMessage> receive(Clock::time_point deadline) override;
  void wake() override;

 private:
  const std::shared_ptr<shm::Attachment> member_;
  Clock::time_point next_liveness_check_{};  // receive() only
  std::atomic<bool> wake_pending_{false};
};

}  // namespace hora::control
