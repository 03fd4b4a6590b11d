#include "control/in_process_control.h"

#include <condition_variable>
#include <deque>
#include <mutex>

#include "hora/errors.h"
#include "store/in_process_join.h"
#include "transport/backend.h"

namespace hora::control {

// The mailboxes of one set's members; every method is thread-safe.
class Mailboxes {
 public:
  explicit Mailboxes(std::vector<int> global_ranks)
      : global_ranks_(std::move(global_ranks)),
        changed_(global_ranks_.size()),
        inboxes_(global_ranks_.size()),
        woken_(global_ranks_.size(), false),
        bells_(global_ranks_.size(), 0),
        armed_(global_ranks_.size(), 0),
        departed_(global_ranks_.size(), false),
        departure_reported_(global_ranks_.size() * global_ranks_.size(), false) {}

  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }

  void send(int from, int to, std::vector<uint8_t> bytes) {
    if (to < 0 || to >= size() || to == from || (from != 0 && to != 0)) {
      throw InvalidArgument(describe_set(global_ranks_) + ": set rank " + std::to_string(from) +
                            " cannot send a control message to set rank " + std::to_string(to));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (departed_[to]) {
        throw PeerFailure(describe_set(global_ranks_) + ": control connection to global rank " +
                          std::to_string(global_ranks_[to]) + " closed");
      }
      inboxes_[to].push_back(ControlMessage{from, std::move(bytes), false, {}, {}});
    }
    changed_[to].notify_all();
    ring(to);
  }

  std::optional<ControlMessage> receive(int rank, ControlPlane::Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto& inbox = inboxes_[rank];
    changed_[rank].wait_until(lock, deadline, [&] { return ready_locked(rank); });
    if (!inbox.empty()) {
      ControlMessage message = std::move(inbox.front());
      inbox.pop_front();
      return message;
    }
    if (woken_[rank]) {
      woken_[rank] = false;
      return std::nullopt;
    }
    if (const int gone = unreported_departure_locked(rank); gone >= 0) {
      departure_reported_[rank * size() + gone] = true;
      return ControlMessage{gone, {}, true, {}, {}};
    }
    return std::nullopt;
  }

  void wake(int rank) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      woken_[rank] = true;
    }
    changed_[rank].notify_all();
    ring(rank);
  }

  // The word `rank`'s arming names, and its value now; nullopt (not armed)
  // when receive() has something at once.
  std::optional<FutexWait> arm(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ready_locked(rank)) return std::nullopt;
    ++armed_[rank];
    return FutexWait{&bells_[rank], std::atomic_ref<uint32_t>(bells_[rank]).load()};
  }
  void disarm(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    --armed_[rank];
  }

  void depart(int rank) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      departed_[rank] = true;
    }
    for (auto& changed : changed_) changed.notify_all();
    for (int r = 0; r < size(); ++r) ring(r);
  }

 private:
  bool ready_locked(int rank) const {
    return !inboxes_[rank].empty() || woken_[rank] || unreported_departure_locked(rank) >= 0;
  }

  // Moves `rank`'s word (a change of what ready_locked() says was made
  // before) and wakes whoever armed it.
  void ring(int rank) {
    bool armed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::atomic_ref<uint32_t>(bells_[rank]).fetch_add(1);
      armed = armed_[rank] > 0;
    }
    if (armed) futex_wake_all(&bells_[rank]);
  }

  // A departed member that `rank` talks to and whose departure `rank` has
  // not been told of, as a set rank, or -1.
  int unreported_departure_locked(int rank) const {
    for (int r = 0; r < size(); ++r) {
      const bool is_peer = rank == 0 ? r != 0 : r == 0;
      if (is_peer && departed_[r] && !departure_reported_[rank * size() + r]) return r;
    }
    return -1;
  }

  const std::vector<int> global_ranks_;
  std::mutex mutex_;
  std::vector<std::condition_variable> changed_;  // by receiver
  std::vector<std::deque<ControlMessage>> inboxes_;
  std::vector<bool> woken_;
  std::vector<uint32_t> bells_;  // futex words, by receiver
  std::vector<int> armed_;
  std::vector<bool> departed_;
  std::vector<bool> departure_reported_;  // [receiver * size + departed]
};

std::unique_ptr<InProcessControlPlane> InProcessControlPlane::connect(const std::vector<int>& global_ranks, int rank,
                                                                      Store& store, std::chrono::milliseconds timeout,
                                                                      const std::atomic<bool>& cancelled) {
  auto mailboxes = std::static_pointer_cast<Mailboxes>(join_in_process(
      store, "control/in_process", static_cast<int64_t>(global_ranks.size()),
      [&] { return std::make_shared<Mailboxes>(global_ranks); }, timeout, cancelled, "in-process control plane"));
  if (mailboxes->global_ranks() != global_ranks)
    throw InvalidArgument("in-process control plane: members disagree on the process set's ranks");
  return std::unique_ptr<InProcessControlPlane>(new InProcessControlPlane(std::move(mailboxes), rank));
}

InProcessControlPlane::InProcessControlPlane(std::shared_ptr<Mailboxes> mailboxes, int rank)
    : mailboxes_(std::move(mailboxes)), rank_(rank) {}

InProcessControlPlane::~InProcessControlPlane() { mailboxes_->depart(rank_); }

void InProcessControlPlane::send(int to, const std::vector<uint8_t>& bytes) { mailboxes_->send(rank_, to, bytes); }

std::optional<ControlMessage> InProcessControlPlane::receive(Clock::time_point deadline) {
  return mailboxes_->receive(rank_, deadline);
}

void InProcessControlPlane::wake() { mailboxes_->wake(rank_); }

std::optional<ControlPlane::Armed> InProcessControlPlane::arm() {
  std::optional<FutexWait> wait = mailboxes_->arm(rank_);
  if (!wait) return std::nullopt;
  return Armed{*wait, {}, Clock::time_point::max()};
}

void InProcessControlPlane::disarm() { mailboxes_->disarm(rank_); }

}  // namespace hora::control
