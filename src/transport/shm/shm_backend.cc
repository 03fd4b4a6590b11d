#include "transport/shm/shm_backend.h"

#include <algorithm>
#include <cstring>

#include "hora/errors.h"

namespace hora::shm {
namespace {

template <typename T>
std::atomic_ref<T> shared(const Segment& segment, uint64_t offset) {
  return std::atomic_ref<T>(*segment.field_at<T>(offset));
}

}  // namespace

ShmBackend::ShmBackend(std::shared_ptr<Attachment> member)
    : member_(std::move(member)),
      global_ranks_(member_->global_ranks),
      rank_(member_->rank),
      set_name_(member_->set_name),
      segment_(member_->segment),
      timeout_(member_->timeout),
      tuning_(member_->tuning),
      bells_(member_->bells),
      data_bells_(member_->data_bells),
      seats_(member_->seats),
      peers_(member_->peers),
      seen_gone_(global_ranks_.size(), false) {}

bool is_shm_backend(const Backend& backend) { return dynamic_cast<const ShmBackend*>(&backend) != nullptr; }

uint8_t* ShmBackend::slot(int member, int buffer) const {
  return segment_.at(segment_.layout().slot_offset(static_cast<uint32_t>(member), buffer));
}

void ShmBackend::prepare_own_slots(size_t bytes) {
  const uint64_t slot_bytes = segment_.layout().slot_bytes;
  const uint64_t wanted = std::min<uint64_t>((bytes + kSlotGrowth - 1) / kSlotGrowth * kSlotGrowth, slot_bytes);
  if (wanted <= prepared_) return;
  for (int buffer = 0; buffer < 2; ++buffer) populate(slot(rank_, buffer) + prepared_, wanted - prepared_);
  prepared_ = wanted;
}

uint64_t ShmBackend::progress_of(int member) const {
  const uint64_t area = segment_.layout().member_offset(static_cast<uint32_t>(member));
  return shared<uint64_t>(segment_, area + field::kProgress).load(std::memory_order_acquire);
}

uint64_t ShmBackend::side_of(int member, uint64_t phase) const {
  const uint64_t area = segment_.layout().member_offset(static_cast<uint32_t>(member));
  return shared<uint64_t>(segment_, area + field::kSide + 8 * (phase % 2)).load(std::memory_order_relaxed);
}

uint64_t ShmBackend::sync(uint64_t side) {
  const uint64_t phase = ++phase_;
  const uint64_t area = segment_.layout().member_offset(static_cast<uint32_t>(rank_));
  shared<uint64_t>(segment_, area + field::kSide + 8 * (phase % 2)).store(side, std::memory_order_relaxed);
  seats_.take();
  shared<uint64_t>(segment_, area + field::kProgress).store(phase, std::memory_order_release);
  for (int r = 0; r < size(); ++r)
    if (r != rank_) data_bells_[r].ring();
  wait_for_all(phase);
  return phase;
}

void ShmBackend::wait_for_all(uint64_t phase) {
  auto ready = [&] {
    for (int r = 0; r < size(); ++r)
      if (progress_of(r) < phase) return false;
    return true;
  };
  auto idle = [&] {
    check_data_plane(phase);
    member_->rings.drain_if_reader();
  };
  auto crowded = [&] { return seats_.crowded([&](int r) { return progress_of(r) < phase; }); };
  if (data_bells_[rank_].wait(ready, idle, member_->deadline(), tuning_.spin, crowded)) return;
  std::vector<int> missing;
  for (int r = 0; r < size(); ++r)
    if (progress_of(r) < phase) missing.push_back(r);
  throw Timeout("timed out after " + std::to_string(timeout_.count()) + " ms waiting for " + name_members(missing));
}

// Once seen gone, a member stays gone (its pid may be reused).
bool ShmBackend::member_gone(int member) {
  if (seen_gone_[member]) return true;
  if (member_->member_departed(member) || peers_.exited(member)) seen_gone_[member] = true;
  return seen_gone_[member];
}

void ShmBackend::check_data_plane(uint64_t phase) {
  if (aborted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw PeerFailure("this member gave up the process set: " + abort_reason_);
  }
  const uint64_t abort_offset = segment_.layout().abort_offset() + field::kAbortState;
  if (shared<uint32_t>(segment_, abort_offset).load(std::memory_order_acquire) != kRunning)
    throw PeerFailure(abort_record());
  const auto now = Clock::now();
  const bool look_at_processes = now >= next_liveness_check_;
  if (look_at_processes) next_liveness_check_ = now + kLivenessInterval;
  // Gone first, progress second: a member publishes its progress before it
  // departs or exits, so one seen gone whose progress then reaches `phase`
  // left after this phase (read the other way round, a member that
  // finished the phase and left in between would be called missing).
  std::vector<int> gone;
  for (int r = 0; r < size(); ++r) {
    if (r == rank_) continue;
    const bool left = look_at_processes ? member_gone(r) : (seen_gone_[r] || member_->member_departed(r));
    if (left && progress_of(r) < phase) gone.push_back(r);
  }
  if (!gone.empty()) throw PeerFailure(name_members(gone) + " left the process set (exited or closed it)");
}

std::string ShmBackend::name_members(const std::vector<int>& set_ranks) const {
  std::string out = "global rank(s) [";
  for (size_t i = 0; i < set_ranks.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(global_ranks_[set_ranks[i]]);
  }
  out += "] (pid";
  for (int r : set_ranks) out += " " + std::to_string(peers_.pid(r));
  return out + ")";
}

std::string ShmBackend::abort_record() const {
  const uint64_t offset = segment_.layout().abort_offset();
  if (shared<uint32_t>(segment_, offset + field::kAbortState).load(std::memory_order_acquire) != kAborted)
    return "a member gave up the process set";
  const int32_t by = *segment_.field_at<int32_t>(offset + field::kAbortBy);
  const char* text = reinterpret_cast<const char*>(segment_.at(offset + field::kAbortReason));
  const std::string reason(text, strnlen(text, kAbortReasonBytes));
  const std::string who = by >= 0 && by < size() ? "global rank " + std::to_string(global_ranks_[by]) : "a member";
  return who + " gave up the process set: " + reason;
}

void ShmBackend::give_up(const std::string& reason) noexcept {
  const uint64_t offset = segment_.layout().abort_offset();
  uint32_t expected = kRunning;
  if (shared<uint32_t>(segment_, offset + field::kAbortState)
          .compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) {
    *segment_.field_at<int32_t>(offset + field::kAbortBy) = rank_;
    char* text = reinterpret_cast<char*>(segment_.at(offset + field::kAbortReason));
    const size_t length = std::min(reason.size(), kAbortReasonBytes - 1);
    std::memcpy(text, reason.data(), length);
    text[length] = '\0';
    shared<uint32_t>(segment_, offset + field::kAbortState).store(kAborted, std::memory_order_release);
  }
  for (int r = 0; r < size(); ++r) {
    bells_[r].ring();
    data_bells_[r].ring();
  }
}

void ShmBackend::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_) return;
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  give_up(reason);
}

void ShmBackend::expect_one_per_member(const char* name, const std::vector<size_t>& sizes) const {
  if (sizes.size() != global_ranks_.size())
    throw InvalidArgument(set_name_ + ": " + name + " needs one size per member, got " + std::to_string(sizes.size()));
}

}  // namespace hora::shm
