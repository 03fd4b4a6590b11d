// NegotiatedAgreement: every op is negotiated through the coordinator
// (control/agreement.h). The log is this member's own count of the
// coordinator's responses, in the order they arrived (members) or were sent
// (coordinator): no cached op is agreed without the coordinator. Used by sets
// whose members do not share one host. Engine thread only.
#pragma once

#include "control/agreement.h"

namespace hora::control {

class NegotiatedAgreement final : public Agreement {
 public:
  size_t rows() const override { return 0; }
  Outcome submit(uint32_t slot) override;

  std::optional<Entry> entry(uint64_t index) const override;
  void set_consumed(uint64_t next) override { consumed_ = next; }
  bool entry_waiting() const override { return consumed_ < appended_; }
  void watch(uint32_t, bool) override {}
  void wait_for_entry(uint64_t, const std::function<bool()>&) const override {}
  void wake_drivers() const override {}

  void response_received() override { ++appended_; }

  bool has_room(size_t) const override { return true; }
  void append_response() override { ++appended_; }
  std::vector<int> divert(uint32_t) override { return {}; }
  bool try_undivert(uint32_t) override { return true; }
  bool take_drain_request() override { return false; }
  RowState row_state(uint32_t) const override { return {}; }

 private:
  uint64_t appended_ = 0;
  uint64_t consumed_ = 0;
};

}  // namespace hora::control
