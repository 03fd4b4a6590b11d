#include "runtime/set_links.h"

#include "control/lane_agreement.h"
#include "control/negotiated_agreement.h"

namespace hora {

SetLinks::SetLinks(SetTransports transports)
    : backend_(std::move(transports.backend)), control_(std::move(transports.control)) {
  if (shm::FastLane* lane = transports.fast_lane) {
    agreement_ = std::make_unique<control::LaneAgreement>(*lane);
    fast_lane_ = true;
  } else {
    agreement_ = std::make_unique<control::NegotiatedAgreement>();
  }
}

}  // namespace hora
