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
  // Arms the member's doorbell, which senders, wake() and the fast lane
  // ring; looks again at the next liveness check.
  bool armable() const override { return true; }
  std::optional<Armed> arm() override;
  bool await_briefly() override;
  void disarm() override;

 private:
  // Whether receive() has something to return at once (under the rings'
  // reader mutex).
  bool ready() const;

  const std::shared_ptr<shm::Attachment> member_;
  std::atomic<Clock::rep> next_liveness_check_{0};  // written by receive() only
  std::atomic<bool> wake_pending_{false};
};

}  // namespace hora::control
