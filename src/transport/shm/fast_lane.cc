#include "transport/shm/fast_lane.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

namespace hora::shm {
namespace {

// A row: member bits 0..30, the diverted flag, completions in bits 32..63.
constexpr uint64_t kDivertedBit = uint64_t{1} << 31;
constexpr uint64_t kLowHalf = 0xffffffffu;
// A log entry: the low 32 bits of its position + 1 (so that zeroed memory
// holds no entry), then the payload: a slot, or kResponsePayload.
constexpr uint32_t kResponsePayload = 0x80000000u;
// A host's lane: the slot's result is in the carried area.
constexpr uint32_t kCarriedPayload = 0x40000000u;

}  // namespace

FastLane::FastLane(const Segment& segment, int rank, int size, const std::vector<Doorbell>& bells, const Seats& seats,
                   std::chrono::nanoseconds spin, Mode mode, std::function<void(int member)> wake,
                   std::chrono::nanoseconds yield_look)
    : segment_(&segment),
      rank_(rank),
      size_(size),
      bells_(&bells),
      seats_(&seats),
      spin_(spin),
      yield_look_(yield_look),
      full_((uint64_t{1} << size) - 1),
      mode_(mode),
      wake_(std::move(wake)) {
  for (int r = 0; r < size_; ++r) {
    const uint64_t area = segment.layout().member_offset(static_cast<uint32_t>(r));
    lane_bells_.emplace_back(segment.field_at<uint32_t>(area + field::kLaneBell),
                             segment.field_at<uint32_t>(area + field::kLaneSleepers));
  }
}

std::atomic_ref<uint64_t> FastLane::row(uint32_t slot) const {
  const uint64_t offset = segment_->layout().lane_offset() + field::kLaneRowsAt + 8 * uint64_t{slot};
  return std::atomic_ref<uint64_t>(*segment_->field_at<uint64_t>(offset));
}

std::atomic_ref<uint64_t> FastLane::log_word(uint64_t index) const {
  const uint64_t offset = segment_->layout().lane_offset() + field::kLaneLogAt + 8 * (index % kLaneLogEntries);
  return std::atomic_ref<uint64_t>(*segment_->field_at<uint64_t>(offset));
}

std::atomic_ref<uint64_t> FastLane::tail() const {
  return std::atomic_ref<uint64_t>(*segment_->field_at<uint64_t>(segment_->layout().lane_offset() + field::kLaneTail));
}

uint64_t FastLane::member_field(int member, uint64_t offset) const {
  const uint64_t area = segment_->layout().member_offset(static_cast<uint32_t>(member));
  return std::atomic_ref<uint64_t>(*segment_->field_at<uint64_t>(area + offset)).load(std::memory_order_acquire);
}

FastLane::Outcome FastLane::submit(uint32_t slot) {
  const uint64_t bit = uint64_t{1} << rank_;
  seats_->take();
  uint64_t now = row(slot).fetch_or(bit, std::memory_order_acq_rel) | bit;
  if (now & kDivertedBit) {
    const uint64_t offset = segment_->layout().lane_offset() + field::kLaneDrain;
    std::atomic_ref<uint32_t>(*segment_->field_at<uint32_t>(offset)).store(1, std::memory_order_release);
    if (mode_ == Mode::kHost) {
      if (rank_ != 0) alert_leader();
    } else {
      (*bells_)[0].ring();
    }
    return Outcome::kDiverted;
  }
  if ((now & full_) != full_) return Outcome::kWaiting;
  // Every member has submitted: nobody else changes the row now, except
  // the coordinator (a host's leader) diverting it, which then owns the op.
  const uint64_t reset = ((now >> 32) + 1) << 32;
  if (!row(slot).compare_exchange_strong(now, reset, std::memory_order_acq_rel)) return Outcome::kDiverted;
  if (mode_ == Mode::kSet) {
    append(slot);
    return Outcome::kAppended;
  }
  completed_word(slot).fetch_or(uint64_t{1} << (slot % 64), std::memory_order_acq_rel);
  if (rank_ != 0) alert_leader();
  return Outcome::kCompleted;
}

// A host's lane: the leader's caller, asleep waiting for an entry, looks
// at the lane itself when rung (HostAgreement::wait_for_entry); otherwise
// its engine thread is woken. Ordered against a caller about to sleep as
// ring() is: one of the two sees the other.
void FastLane::alert_leader() const {
  if (lane_bells_[0].sleeping()) lane_bells_[0].ring();
  else if (wake_) wake_(0);
}

bool FastLane::leader_attention() const {
  const uint64_t offset = segment_->layout().lane_offset() + field::kLaneDrain;
  if (std::atomic_ref<uint32_t>(*segment_->field_at<uint32_t>(offset)).load(std::memory_order_acquire) != 0) return true;
  for (uint32_t word = 0; word < kLaneRows / 64; ++word)
    if (completed_word(word * 64).load(std::memory_order_acquire) != 0) return true;
  return false;
}

std::atomic_ref<uint64_t> FastLane::completed_word(uint32_t slot) const {
  const uint64_t offset = segment_->layout().lane_offset() + field::kLaneCompletedAt + 8 * uint64_t{slot / 64};
  return std::atomic_ref<uint64_t>(*segment_->field_at<uint64_t>(offset));
}

std::vector<uint32_t> FastLane::take_completed() {
  std::vector<uint32_t> slots;
  for (uint32_t word = 0; word < kLaneRows / 64; ++word) {
    if (completed_word(word * 64).load(std::memory_order_relaxed) == 0) continue;
    uint64_t bits = completed_word(word * 64).exchange(0, std::memory_order_acq_rel);
    for (; bits != 0; bits &= bits - 1) slots.push_back(word * 64 + static_cast<uint32_t>(__builtin_ctzll(bits)));
  }
  return slots;
}

bool FastLane::carries(const Segment& segment, uint32_t slot) {
  return segment.layout().carries() && slot < kCarriedRows;
}

void FastLane::write_carried(uint32_t slot, uint32_t member, std::span<const uint8_t> data) {
  const uint64_t at = segment_->layout().carried_offset(slot, member);
  const auto bytes = static_cast<uint32_t>(std::min<uint64_t>(data.size(), kCarriedBytes));
  if (bytes > 0) std::memcpy(segment_->field_at<uint8_t>(at + kLine), data.data(), bytes);
  // Published by the submission (or append) that follows.
  std::atomic_ref<uint32_t>(*segment_->field_at<uint32_t>(at + field::kCarriedSize)).store(bytes, std::memory_order_relaxed);
}

std::vector<uint8_t> FastLane::read_carried(uint32_t slot, uint32_t member) const {
  const uint64_t at = segment_->layout().carried_offset(slot, member);
  const uint32_t bytes =
      std::atomic_ref<uint32_t>(*segment_->field_at<uint32_t>(at + field::kCarriedSize)).load(std::memory_order_relaxed);
  const uint8_t* data = segment_->field_at<uint8_t>(at + kLine);
  return std::vector<uint8_t>(data, data + std::min<uint64_t>(bytes, kCarriedBytes));
}

void FastLane::write_input(uint32_t slot, std::span<const uint8_t> data) {
  if (carries(*segment_, slot)) write_carried(slot, static_cast<uint32_t>(rank_), data);
}

std::vector<uint8_t> FastLane::input(uint32_t slot, int member) const {
  if (!carries(*segment_, slot)) return {};
  return read_carried(slot, static_cast<uint32_t>(member));
}

void FastLane::write_result(uint32_t slot, std::span<const uint8_t> data) {
  if (carries(*segment_, slot)) write_carried(slot, segment_->layout().ranks, data);
}

std::vector<uint8_t> FastLane::result(uint32_t slot) const {
  if (!carries(*segment_, slot)) return {};
  return read_carried(slot, segment_->layout().ranks);
}

void FastLane::append_slot(uint32_t slot, bool carried) { append(slot | (carried ? kCarriedPayload : 0)); }

uint64_t FastLane::min_consumed() const {
  uint64_t least = member_field(0, field::kConsumed);
  for (int r = 1; r < size_; ++r) least = std::min(least, member_field(r, field::kConsumed));
  return least;
}

// Waits for room when the slowest member is a whole log behind (it runs
// entries in order, so room comes unless the set is given up).
void FastLane::append(uint32_t payload) {
  const uint64_t index = tail().fetch_add(1, std::memory_order_acq_rel);
  const uint64_t abort_state = segment_->layout().abort_offset() + field::kAbortState;
  while (index - min_consumed() >= kLaneLogEntries) {
    if (std::atomic_ref<uint32_t>(*segment_->field_at<uint32_t>(abort_state)).load(std::memory_order_acquire) !=
        kRunning)
      return;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  log_word(index).store(((index + 1) << 32) | payload, std::memory_order_release);
  ring_watchers();
}

void FastLane::ring_watchers() const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int r = 0; r < size_; ++r) {
    const uint64_t area = segment_->layout().member_offset(static_cast<uint32_t>(r));
    const uint32_t watching =
        std::atomic_ref<uint32_t>(*segment_->field_at<uint32_t>(area + field::kWatch)).load(std::memory_order_relaxed);
    if (watching & kEngine) {
      if (mode_ == Mode::kSet) (*bells_)[r].ring();
      else if (wake_) wake_(r);
    }
    if (watching & kDriver) lane_bells_[r].ring();
  }
}

std::optional<FastLane::Entry> FastLane::entry(uint64_t index) const {
  const uint64_t word = log_word(index).load(std::memory_order_acquire);
  if ((word >> 32) != ((index + 1) & kLowHalf)) return std::nullopt;
  const auto payload = static_cast<uint32_t>(word & kLowHalf);
  if (payload == kResponsePayload) return Entry{true, 0, false};
  return Entry{false, payload & ~kCarriedPayload, (payload & kCarriedPayload) != 0};
}

void FastLane::set_consumed(uint64_t next) {
  const uint64_t area = segment_->layout().member_offset(static_cast<uint32_t>(rank_));
  std::atomic_ref<uint64_t>(*segment_->field_at<uint64_t>(area + field::kConsumed)).store(next, std::memory_order_release);
}

uint64_t FastLane::consumed() const { return member_field(rank_, field::kConsumed); }

uint64_t FastLane::appended() const { return tail().load(std::memory_order_acquire); }

void FastLane::watch(uint32_t who, bool on) {
  const uint64_t area = segment_->layout().member_offset(static_cast<uint32_t>(rank_));
  std::atomic_ref<uint32_t> word(*segment_->field_at<uint32_t>(area + field::kWatch));
  if (on) word.fetch_or(who, std::memory_order_seq_cst);
  else word.fetch_and(~who, std::memory_order_seq_cst);
}

bool FastLane::engine_attention() const {
  const uint64_t area = segment_->layout().member_offset(static_cast<uint32_t>(rank_));
  const uint32_t watching =
      std::atomic_ref<uint32_t>(*segment_->field_at<uint32_t>(area + field::kWatch)).load(std::memory_order_seq_cst);
  if ((watching & kEngine) && entry_waiting()) return true;
  if (rank_ != 0) return false;
  if (mode_ == Mode::kHost) return leader_attention();
  const uint64_t offset = segment_->layout().lane_offset() + field::kLaneDrain;
  return std::atomic_ref<uint32_t>(*segment_->field_at<uint32_t>(offset)).load(std::memory_order_acquire) != 0;
}

bool FastLane::has_room(size_t entries) const {
  return tail().load(std::memory_order_acquire) - min_consumed() + entries <= kLaneLogEntries / 2;
}

void FastLane::append_response() { append(kResponsePayload); }

std::vector<int> FastLane::members_of(uint64_t bits) const {
  std::vector<int> members;
  for (int r = 0; r < size_; ++r)
    if (bits & (uint64_t{1} << r)) members.push_back(r);
  return members;
}

std::vector<int> FastLane::divert(uint32_t slot) {
  uint64_t old = row(slot).load(std::memory_order_acquire);
  while (!row(slot).compare_exchange_weak(old, (old & ~kLowHalf) | kDivertedBit, std::memory_order_acq_rel)) {
  }
  return members_of(old & full_);
}

bool FastLane::try_undivert(uint32_t slot) {
  uint64_t old = row(slot).load(std::memory_order_acquire);
  do {
    if (old & full_) return false;
  } while (!row(slot).compare_exchange_weak(old, old & ~kDivertedBit, std::memory_order_acq_rel));
  return true;
}

bool FastLane::take_drain_request() {
  const uint64_t offset = segment_->layout().lane_offset() + field::kLaneDrain;
  return std::atomic_ref<uint32_t>(*segment_->field_at<uint32_t>(offset)).exchange(0, std::memory_order_acq_rel) != 0;
}

FastLane::RowState FastLane::row_state(uint32_t slot) const {
  const uint64_t word = row(slot).load(std::memory_order_acquire);
  RowState state;
  state.completions = static_cast<uint32_t>(word >> 32);
  if (!(word & kDivertedBit)) state.submitted = members_of(word & full_);
  return state;
}

}  // namespace hora::shm
