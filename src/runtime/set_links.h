// SetLinks: everything a process set's engine reaches the other members
// through, in one place: the data plane (a Backend), the control plane
// (send/receive/wake of ControlMessages) and the agreement on ready ops
// (control/agreement.h: the shared-memory fast lane when the set has one,
// else messages beside the negotiation, or negotiation alone), as the
// planner made them
// (planner/transport_planner.h).
//
// Threads: data() from the executor, receive() and control() from the
// engine thread;
// send(), wake() and abort() from any thread. Owns the Backend, the
// ControlPlane and the Agreement; does not block beyond what their calls do.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "control/agreement.h"
#include "control/control_plane.h"
#include "planner/transport_planner.h"
#include "transport/backend.h"

namespace hora {

class SetLinks {
 public:
  // The agreement is the planner's when it made one (a host agreement),
  // else the set's fast lane when it has one, else the stream agreement
  // (unless the planner says every op is negotiated).
  explicit SetLinks(SetTransports transports);
  // An agreement of the caller's choice (`fast_lane`: it is agreed in
  // shared memory).
  SetLinks(std::unique_ptr<Backend> backend, std::unique_ptr<ControlPlane> control,
           std::unique_ptr<control::Agreement> agreement, bool fast_lane)
      : backend_(std::move(backend)),
        control_(std::move(control)),
        agreement_(std::move(agreement)),
        fast_lane_(fast_lane) {}

  Backend& data() { return *backend_; }
  int size() const { return backend_->size(); }
  void send(int to, const std::vector<uint8_t>& bytes) { control_->send(to, bytes); }
  std::optional<ControlMessage> receive(std::chrono::steady_clock::time_point deadline) {
    return control_->receive(deadline);
  }
  std::optional<ControlMessage> receive_now() { return control_->receive_now(); }
  void wake() { control_->wake(); }
  ControlPlane& control() { return *control_; }
  // Gives up the data plane (Backend::abort); the control plane keeps working.
  void abort(const std::string& reason) { backend_->abort(reason); }

  control::Agreement& agreement() { return *agreement_; }
  // Whether ops are agreed in shared memory (telemetry names the transport "shm").
  bool fast_lane() const { return fast_lane_; }

 private:
  // Declared so that the agreement (which may point into the shared
  // segment) goes first, then the control plane, then the data plane.
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<void> agreement_parts_;  // what the planner's agreement (and the control plane) point into
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<control::Agreement> agreement_;
  bool fast_lane_ = false;
};

}  // namespace hora
