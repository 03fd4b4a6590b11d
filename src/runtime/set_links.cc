#include "runtime/set_links.h"

#include "control/lane_agreement.h"
#include "control/negotiated_agreement.h"
#include "control/stream_agreement.h"

namespace hora {

SetLinks::SetLinks(SetTransports transports)
    : backend_(std::move(transports.backend)), control_(std::move(transports.control)) {
  if (transports.agreement) {
    agreement_parts_ = std::move(transports.agreement_parts);
    agreement_ = std::move(transports.agreement);
  } else if (shm::FastLane* lane = transports.fast_lane) {
    agreement_ = std::make_unique<control::LaneAgreement>(*lane);
    fast_lane_ = true;
  } else if (transports.stream_agreement && backend_->size() >= 2) {
    ControlPlane* control = control_.get();
    agreement_ = std::make_unique<control::StreamAgreement>(
        backend_->rank(), backend_->size(), [control](int to, const std::vector<uint8_t>& bytes) { control->send(to, bytes); },
        [control] { control->wake(); }, transports.agreement_spin);
  } else {
    agreement_ = std::make_unique<control::NegotiatedAgreement>();
  }
}

}  // namespace hora
