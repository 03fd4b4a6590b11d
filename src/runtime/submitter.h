// Submitter: the submitting threads' side of a process set's engine. It
// checks that an op may be submitted (not once stopped, not while this
// member has joined), names it (unnamed ops get "<op>.noname.<n>", counted
// per op type; a join is kJoinName), claims its name (refused while an op of
// that name submitted here has not completed), lets the Executor route it
// and queues it; on a broken set it hands out a failed Work instead.
//
// Any thread; blocks only on its mutex. Owns the set's state as submitters
// see it (connected, broken, stopping, joined) and the names in flight.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "coordinator/tensor_queue.h"
#include "runtime/executor.h"

namespace hora {

class Submitter final : public JoinLedger {
 public:
  struct Submitted {
    std::shared_ptr<Work> work;
    std::optional<uint32_t> slot;  // the agreement decides it: Executor::enter()
    std::vector<uint8_t> carried;  // its input, where the agreement carries it
  };

  // `stopping`: set by stop(); read by anyone (it also cancels a connection
  // in progress).
  Submitter(int32_t process_set_id, TensorQueue& queue, Executor& executor, std::atomic<bool>& stopping)
      : process_set_id_(process_set_id), queue_(queue), executor_(executor), stopping_(stopping) {}

  // Throws InvalidArgument as the header says; `driver` may run the op on
  // a caller that waits for it (Executor::admit).
  Submitted submit(Request request, TensorView input, TensorView output, const std::weak_ptr<WorkDriver>& driver);

  // Records `reason` and runs `on_stop` under the lock; false when stopped
  // already.
  template <typename OnStop>
  bool stop(const std::string& reason, OnStop&& on_stop) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return false;
    stop_reason_ = reason;
    stopping_ = true;
    on_stop();
    return true;
  }
  // Runs `publish(stop_reason or null)` under the lock, then wakes
  // wait_connected().
  template <typename Publish>
  void connected(Publish&& publish) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      publish(stopping_ ? &stop_reason_ : nullptr);
      connected_ = true;
    }
    connected_cv_.notify_all();
  }
  // The set is broken: later submissions get a Work failed with `error`.
  void broke(std::exception_ptr error);
  // Blocks until the set is connected; rethrows a connection failure.
  void wait_connected();
  std::string stop_reason() const;

  // JoinLedger (the executor).
  bool joined() const override;
  void stood_in(OpType op, const std::string& name) override;
  void join_finished() override;

 private:
  void claim_name(const Request& request, const std::shared_ptr<Work>& work);

  const int32_t process_set_id_;
  TensorQueue& queue_;
  Executor& executor_;

  mutable std::mutex mutex_;
  std::condition_variable connected_cv_;
  bool connected_ = false;
  std::exception_ptr broken_;
  std::atomic<bool>& stopping_;
  std::string stop_reason_;
  bool joined_ = false;  // a join op of this member is pending
  std::map<OpType, int64_t> noname_counters_;
  // Ops submitted here, by name, until their names are free again: a second
  // op of the same name meanwhile is refused (claim_name).
  std::unordered_map<std::string, std::shared_ptr<WorkRecord>> in_flight_;
  std::atomic<uint64_t> submit_count_{0};  // ops submitted here so far
  size_t sweep_in_flight_at_ = 64;
};

}  // namespace hora
