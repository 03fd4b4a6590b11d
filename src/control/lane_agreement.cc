#include "control/lane_agreement.h"

#include "hora/errors.h"
#include "transport/shm/segment.h"

namespace hora::control {

static_assert(Agreement::kEngine == shm::FastLane::kEngine && Agreement::kDriver == shm::FastLane::kDriver);

size_t LaneAgreement::rows() const { return shm::kLaneRows; }

Agreement::Outcome LaneAgreement::submit(uint32_t slot) {
  switch (lane_.submit(slot)) {
    case shm::FastLane::Outcome::kWaiting:
      return Outcome::kWaiting;
    case shm::FastLane::Outcome::kAppended:
      return Outcome::kAppended;
    case shm::FastLane::Outcome::kDiverted:
      break;
    case shm::FastLane::Outcome::kCompleted:
      throw Internal("a set's fast lane completed a row as a host's lane");
  }
  return Outcome::kDiverted;
}

std::optional<Agreement::Entry> LaneAgreement::entry(uint64_t index) const {
  std::optional<shm::FastLane::Entry> entry = lane_.entry(index);
  if (!entry) return std::nullopt;
  return Entry{entry->response, entry->slot, nullptr};
}

void LaneAgreement::watch(uint32_t who, bool on) { lane_.watch(who, on); }

void LaneAgreement::wait_for_entry(uint64_t index, const std::function<bool()>& give_up) const {
  lane_.wait_for_entry(index, give_up);
}

Agreement::RowState LaneAgreement::row_state(uint32_t slot) const {
  shm::FastLane::RowState state = lane_.row_state(slot);
  return RowState{std::move(state.submitted), state.completions};
}

}  // namespace hora::control
