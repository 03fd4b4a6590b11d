// Shared state of one process set whose members are threads of this process.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "transport/backend.h"

namespace hora::local {

// What one member contributes to a collective: its buffers and sizes, read
// by the other members between publish() and release().
struct Post {
  const void* in = nullptr;
  size_t bytes = 0;
  const std::vector<size_t>* split = nullptr;  // alltoallv send sizes
};

// The meeting point of one process set's members (threads of one process).
//
// Collectives are two phases: publish() blocks until every member has posted
// its buffers, each member then reads what it needs straight from the
// others' memory, and release() blocks until every member is done reading,
// so no buffer is reused while a peer still reads it. Both phases block on a
// condition variable with a generation counter. Every member's LocalBackend
// holds a shared_ptr; all
// methods are thread-safe. A timeout, a departed member or abort() breaks
// the data plane: every later collective throws PeerFailure.
class LocalRendezvous {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LocalRendezvous(std::vector<int> global_ranks);

  int size() const { return static_cast<int>(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const { return global_ranks_; }

  // Blocks until every member has attached (backend creation), the
  // deadline passes (Timeout) or `cancelled` is set (InvalidArgument; this
  // member then counts as departed).
  void attach(int rank, Clock::time_point deadline, const std::atomic<bool>& cancelled);
  // Marks `rank` as gone: peers waiting on it fail with PeerFailure.
  void detach(int rank) noexcept;

  // Phase 1 of a collective: returns every member's post, in set-rank order.
  std::vector<Post> publish(int rank, Post post, Clock::time_point deadline);
  // Phase 2 of a collective.
  void release(int rank, Clock::time_point deadline);
  // A barrier without data.
  void arrive(int rank, Clock::time_point deadline);
  // Breaks the data plane for every member: collectives in progress and
  // later ones throw PeerFailure naming `reason`.
  void abort(const std::string& reason);

 private:
  void arrive_locked(std::unique_lock<std::mutex>& lock, int rank, Clock::time_point deadline,
                     const std::atomic<bool>* cancelled = nullptr);
  void throw_if_broken_locked() const;
  [[noreturn]] void break_locked(bool timed_out, const std::string& why);
  // Global ranks of members that have not arrived in the current phase.
  std::vector<int> missing_locked() const;
  std::string describe() const;

  const std::vector<int> global_ranks_;
  std::mutex mutex_;
  std::condition_variable phase_done_;
  uint64_t phase_ = 0;
  int arrived_count_ = 0;
  std::vector<bool> arrived_;
  std::vector<bool> departed_;
  std::vector<Post> posts_;
  bool broken_ = false;
  std::string broken_reason_;
};

}  // namespace hora::local
