#include "runtime/set_links.h"

#include "control/lane_agreement.h"
#include "control/negotiated_agreement.h"

namespace hora {

SetLinks::SetLinks(std::unique_ptr<Backend> backend) : backend_(std::move(backend)) {
  if (shm::FastLane* lane = backend_->fast_lane()) {
    agreement_ = std::make_unique<control::LaneAgreement>(*lane);
    fast_lane_ = true;
  } else {
    agreement_ = std::make_unique<control::NegotiatedAgreement>();
  }
}

}  // namespace hora
