// The control plane of a process set whose members are threads of one
// process (the local transport, in tests): one mailbox per member.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include "control/control_plane.h"
#include "hora/store.h"

namespace hora::control {

class Mailboxes;

// Threading is as ControlPlane states. Destroying it marks the member
// departed: its peers receive the closure once, after its messages, and
// sending to it fails with PeerFailure.
class InProcessControlPlane final : public ControlPlane {
 public:
  // Joins the set's mailboxes through `store` (every member's must be the
  // same store, as for the local transport).
  static std::unique_ptr<InProcessControlPlane> connect(const std::vector<int>& global_ranks, int rank,
                                                        Store& store, std::chrono::milliseconds timeout,
                                                        const std::atomic<bool>& cancelled);
  ~InProcessControlPlane() override;

  void send(int to, const std::vector<uint8_t>& bytes) override;
  std::optional<ControlMessage> receive(Clock::time_point deadline) override;
  void wake() override;
  bool armable() const override { return true; }
  std::optional<Armed> arm() override;
  void disarm() override;

 private:
  InProcessControlPlane(std::shared_ptr<Mailboxes> mailboxes, int rank);

  const std::shared_ptr<Mailboxes> mailboxes_;
  const int rank_;
};

}  // namespace hora::control
