// Stand-ins for the engine's parts' surroundings, for thread-free tests: an
// Agreement whose slots the test fills and inspects, one-member and scripted
// data and control planes.
#pragma once

#include <map>
#include <set>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "control/agreement.h"
#include "coordinator/request.h"
#include "runtime/engine_options.h"
#include "control/control_plane.h"
#include "planner/transport_planner.h"
#include "transport/backend.h"

namespace hora::testing {

// Process set 7 with global ranks {1, 3, 5}, seen from set rank `rank`: set
// rank r is global rank 2r+1, so a message naming set ranks instead of
// global ones shows. Op timeout 1 s, no stall warnings.
inline EngineOptions set_seven(int rank) {
  EngineOptions o;
  o.process_set_id = 7;
  o.global_ranks = {1, 3, 5};
  o.rank = rank;
  o.timeout = std::chrono::milliseconds{1000};
  o.stall_warning_time = std::chrono::milliseconds{0};
  return o;
}

inline Request allreduce_of(std::string name, std::vector<int64_t> shape = {4}) {
  Request q;
  q.name = std::move(name);
  q.op = OpType::kAllreduce;
  q.dtype = DataType::kFloat32;
  q.shape = std::move(shape);
  return q;
}

// An agreement on `rows` slots. submit() records the submission and appends
// the slot when `members` have submitted it; diverts hand out `held[slot]`.
class FakeAgreement final : public control::Agreement {
 public:
  explicit FakeAgreement(size_t rows, int members = 1) : rows_(rows), members_(members) {}

  size_t rows() const override { return rows_; }
  Outcome submit(uint32_t slot) override {
    if (diverted.count(slot)) return Outcome::kDiverted;
    held[slot].push_back(0);
    if (static_cast<int>(held[slot].size()) < members_) return Outcome::kWaiting;
    held.erase(slot);
    log.push_back(Entry{false, slot});
    return Outcome::kAppended;
  }
  std::optional<Entry> entry(uint64_t index) const override {
    if (index >= log.size()) return std::nullopt;
    return log[index];
  }
  void set_consumed(uint64_t next) override { consumed = next; }
  bool entry_waiting() const override { return consumed < log.size(); }
  void watch(uint32_t who, bool on) override { watching = on ? (watching | who) : (watching & ~who); }
  void wait_for_entry(uint64_t index, const std::function<bool()>& give_up) const override {
    if (!entry(index) && !give_up()) throw std::logic_error("a driver would wait for an entry nobody appends");
  }
  void wake_drivers() const override {}
  void response_received() override { log.push_back(Entry{true, 0}); }
  bool has_room(size_t entries) const override { return log.size() + entries <= room; }
  void append_response() override { log.push_back(Entry{true, 0}); }
  std::vector<int> divert(uint32_t slot) override {
    diverted.insert(slot);
    ++divert_calls[slot];
    std::vector<int> members = held[slot];
    held.erase(slot);
    return members;
  }
  bool try_undivert(uint32_t slot) override {
    if (refuse_undivert) return false;
    diverted.erase(slot);
    undiverted.insert(slot);
    return true;
  }
  void divert_anew(uint32_t slot) override {
    ++divert_anew_calls[slot];
    given_back.erase(slot);
  }
  bool partly_given_back(uint32_t slot) const override { return given_back.count(slot) != 0; }
  bool take_drain_request() override { return std::exchange(drain, false); }
  uint64_t log_length() const override { return length; }
  RowState row_state(uint32_t slot) const override {
    auto it = held.find(slot);
    if (it == held.end() || diverted.count(slot)) return {};
    return RowState{it->second, completions, unseen};
  }

  std::vector<Entry> log;
  uint64_t consumed = 0;
  uint32_t watching = 0;
  size_t room = 1 << 20;
  std::map<uint32_t, std::vector<int>> held;  // submissions by slot (set ranks)
  std::set<uint32_t> diverted, undiverted;
  std::map<uint32_t, int> divert_calls, divert_anew_calls;
  bool refuse_undivert = false;  // try_undivert(): still being given back
  std::set<uint32_t> given_back;  // partly_given_back(), until divert_anew()
  bool drain = false;
  uint32_t completions = 0;
  bool unseen = false;  // row_state(): members may hold bits out of the coordinator's sight
  uint64_t length = UINT64_MAX;  // log_length()

 private:
  const size_t rows_;
  const int members_;
};

// A set of one: its collectives have nothing to exchange.
class SoloBackend final : public Backend {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce(void*, size_t, DataType, ReduceOp) override {}
  void allgatherv(const void*, void*, const std::vector<size_t>&) override {}
  void broadcast(void*, size_t, int) override {}
  void alltoallv(const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&) override {}
  void barrier() override {}
  void abort(const std::string&) override {}
};

// A control plane with no peers that counts its wake-ups.
class CountingControl final : public ControlPlane {
 public:
  void send(int, const std::vector<uint8_t>&) override {}
  std::optional<ControlMessage> receive(Clock::time_point) override { return {}; }
  void wake() override { ++wakes; }

  int wakes = 0;
};

// The control plane of a member of an n-member set, scripted by the test:
// receive() hands out `inbox` in order, then nothing (at once, or at the
// deadline if `wait_out`); sends are recorded, and fail to members in
// `unreachable`. The set's data plane (ScriptedBackend) records its abort
// here too.
class ScriptedControl final : public ControlPlane {
 public:
  void send(int to, const std::vector<uint8_t>& bytes) override {
    if (unreachable.count(to)) throw std::runtime_error("unreachable");
    sent.emplace_back(to, bytes);
  }
  std::optional<ControlMessage> receive(Clock::time_point deadline) override {
    if (!inbox.empty()) {
      ControlMessage message = inbox.front();
      inbox.erase(inbox.begin());
      return message;
    }
    if (wait_out) std::this_thread::sleep_until(deadline);
    return std::nullopt;
  }
  void wake() override {}

  std::vector<ControlMessage> inbox;
  bool wait_out = true;
  std::set<int> unreachable;
  std::vector<std::pair<int, std::vector<uint8_t>>> sent;
  std::string aborted;
};

class ScriptedBackend final : public Backend {
 public:
  ScriptedBackend(int rank, int size, ScriptedControl& control) : rank_(rank), size_(size), control_(control) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce(void*, size_t, DataType, ReduceOp) override {}
  void allgatherv(const void*, void*, const std::vector<size_t>&) override {}
  void broadcast(void*, size_t, int) override {}
  void alltoallv(const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&) override {}
  void barrier() override {}
  void abort(const std::string& reason) override { control_.aborted = reason; }

 private:
  const int rank_;
  const int size_;
  ScriptedControl& control_;
};

}  // namespace hora::testing
