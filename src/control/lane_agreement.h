// LaneAgreement: agreement through a set's shared-memory fast lane
// (transport/shm/fast_lane.h; control/agreement.h): the slots below
// kLaneRows are agreed by the members' submissions in shared memory, and the
// coordinator appends its responses to the same log. Threads as Agreement
// says; the lane must outlive it.
#pragma once

#include "control/agreement.h"
#include "transport/shm/fast_lane.h"

namespace hora::control {

class LaneAgreement final : public Agreement {
 public:
  explicit LaneAgreement(shm::FastLane& lane) : lane_(lane) {}

  size_t rows() const override;
  Outcome submit(uint32_t slot) override;

  std::optional<Entry> entry(uint64_t index) const override;
  void set_consumed(uint64_t next) override { lane_.set_consumed(next); }
  bool entry_waiting() const override { return lane_.entry_waiting(); }
  void watch(uint32_t who, bool on) override;
  void wait_for_entry(uint64_t index, const std::function<bool()>& give_up) const override;
  void wake_drivers() const override { lane_.wake_drivers(); }

  void response_received() override {}  // the coordinator appended its entry

  bool has_room(size_t entries) const override { return lane_.has_room(entries); }
  void append_response() override { lane_.append_response(); }
  std::vector<int> divert(uint32_t slot) override { return lane_.divert(slot); }
  bool try_undivert(uint32_t slot) override { return lane_.try_undivert(slot); }
  bool take_drain_request() override { return lane_.take_drain_request(); }
  RowState row_state(uint32_t slot) const override;

 private:
  shm::FastLane& lane_;
};

}  // namespace hora::control
