// SetLinks: everything a process set's engine reaches the other members
// through, in one place: the data plane (a Backend), the control plane
// (send/receive/wake of ControlMessages) and the agreement on ready ops
// (control/agreement.h: the shared-memory fast lane when the set has one,
// else negotiation through the coordinator). Today the Backend carries all
// three; this is the one seam to re-point when they come apart.
//
// Threads: data() and receive() from the executor and the engine thread as
// Backend says; send(), wake() and abort() from any thread. Owns the Backend
// and the Agreement; does not block beyond what the Backend's calls do.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "control/agreement.h"
#include "transport/backend.h"

namespace hora {

class SetLinks {
 public:
  // The agreement is the backend's fast lane when it has one, else
  // negotiation through the coordinator.
  explicit SetLinks(std::unique_ptr<Backend> backend);
  // An agreement of the caller's choice (`fast_lane`: it is agreed in
  // shared memory).
  SetLinks(std::unique_ptr<Backend> backend, std::unique_ptr<control::Agreement> agreement, bool fast_lane)
      : backend_(std::move(backend)), agreement_(std::move(agreement)), fast_lane_(fast_lane) {}

  Backend& data() { return *backend_; }
  int size() const { return backend_->size(); }
  void send(int to, const std::vector<uint8_t>& bytes) { backend_->send_control(to, bytes); }
  std::optional<ControlMessage> receive(std::chrono::steady_clock::time_point deadline) {
    return backend_->receive_control(deadline);
  }
  void wake() { backend_->wake(); }
  // Gives up the data plane (Backend::abort); the control plane keeps working.
  void abort(const std::string& reason) { backend_->abort(reason); }

  control::Agreement& agreement() { return *agreement_; }
  // Whether ops are agreed in shared memory (telemetry names the transport "shm").
  bool fast_lane() const { return fast_lane_; }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<control::Agreement> agreement_;
  bool fast_lane_ = false;
};

}  // namespace hora
