#include "transport/local/local_rendezvous.h"

#include <algorithm>

#include "hora/errors.h"

namespace hora::local {
namespace {

std::string format_ranks(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out + "]";
}

}  // namespace

LocalRendezvous::LocalRendezvous(std::vector<int> global_ranks)
    : global_ranks_(std::move(global_ranks)),
      arrived_(global_ranks_.size(), false),
      departed_(global_ranks_.size(), false),
      posts_(global_ranks_.size()) {}

std::string LocalRendezvous::describe() const {
  return "local process set " + format_ranks(global_ranks_);
}

void LocalRendezvous::attach(int rank, Clock::time_point deadline, const std::atomic<bool>& cancelled) {
  std::unique_lock<std::mutex> lock(mutex_);
  arrive_locked(lock, rank, deadline, &cancelled);
}

void LocalRendezvous::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) return;
    broken_ = true;
    broken_reason_ = describe() + ": aborted: " + reason;
  }
  phase_done_.notify_all();
}

void LocalRendezvous::detach(int rank) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    departed_[rank] = true;
  }
  phase_done_.notify_all();
}

std::vector<Post> LocalRendezvous::publish(int rank, Post post, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  throw_if_broken_locked();
  posts_[rank] = post;
  arrive_locked(lock, rank, deadline);
  return posts_;
}

void LocalRendezvous::release(int rank, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  arrive_locked(lock, rank, deadline);
}

void LocalRendezvous::arrive(int rank, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  arrive_locked(lock, rank, deadline);
}

// A generation barrier: the last member to arrive starts the next phase and
// wakes the others; a waiter gives up when the deadline passes or a member
// it waits for has departed.
void LocalRendezvous::arrive_locked(std::unique_lock<std::mutex>& lock, int rank,
                                    Clock::time_point deadline, const std::atomic<bool>* cancelled) {
  throw_if_broken_locked();
  const uint64_t my_phase = phase_;
  arrived_[rank] = true;
  if (++arrived_count_ == size()) {
    arrived_count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    ++phase_;
    phase_done_.notify_all();
    return;
  }
  while (phase_ == my_phase) {
    throw_if_broken_locked();
    std::vector<int> gone;
    for (int r = 0; r < size(); ++r) {
      if (!arrived_[r] && departed_[r]) gone.push_back(global_ranks_[r]);
    }
    if (!gone.empty()) break_locked(false, "global rank(s) " + format_ranks(gone) + " left");
    if (cancelled && *cancelled) {
      arrived_[rank] = false;
      --arrived_count_;
      departed_[rank] = true;
      phase_done_.notify_all();
      throw InvalidArgument(describe() + ": connecting was cancelled");
    }
    // A cancellable wait wakes now and then to look at the flag.
    const auto wake_at = cancelled ? std::min(deadline, Clock::now() + std::chrono::milliseconds(50)) : deadline;
    if (phase_done_.wait_until(lock, wake_at) == std::cv_status::timeout && phase_ == my_phase &&
        Clock::now() >= deadline) {
      break_locked(true, "timed out waiting for global rank(s) " + format_ranks(missing_locked()));
    }
  }
}

std::vector<int> LocalRendezvous::missing_locked() const {
  std::vector<int> missing;
  for (int r = 0; r < size(); ++r) {
    if (!arrived_[r]) missing.push_back(global_ranks_[r]);
  }
  return missing;
}

void LocalRendezvous::throw_if_broken_locked() const {
  if (broken_) throw PeerFailure(broken_reason_ + " (the set is broken)");
}

void LocalRendezvous::break_locked(bool timed_out, const std::string& why) {
  broken_ = true;
  broken_reason_ = describe() + ": " + why;
  phase_done_.notify_all();
  if (timed_out) throw Timeout(broken_reason_);
  throw PeerFailure(broken_reason_);
}

}  // namespace hora::local
