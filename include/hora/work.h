// Work: the handle of one submitted op. The progress engine completes or
// fails it on its own thread; any thread may poll or wait. wait() rethrows
// the op's error (a hora::Error kind) on the waiting thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

namespace hora {

// What the progress engine keeps of a submitted op to decide when its name
// may be used again (Submitter::claim_name): whether a caller saw the op
// finish, and the engine's submit count when it finished. Shared by the Work
// and the engine, so it outlives a handle the caller dropped.
struct WorkRecord {
  explicit WorkRecord(const std::atomic<uint64_t>& submit_count) : submit_count(submit_count) {}
  const std::atomic<uint64_t>& submit_count;  // the engine's; read when the op finishes
  std::atomic<bool> observed{false};           // wait() returned or ready() said true
  std::atomic<int64_t> finished_at{-1};        // submit_count when it finished; -1 while it runs
};

class Work;

// Something that can run the op behind a Work on the thread that waits for
// it (the progress engine of a set with a fast lane): no hand-off to another
// thread for an op the caller waits for anyway.
class WorkDriver {
 public:
  virtual ~WorkDriver() = default;
  // Runs ops until `work` is done, or returns early when it cannot go on
  // (the rest is the engine thread's).
  virtual void drive(const Work& work) = 0;
};

class Work {
 public:
  // True once done (a true answer marks the record observed).
  bool ready() const;
  // The same without marking anything: for code that tracks the op on the
  // caller's behalf (keeping buffers alive), not for the caller itself.
  bool finished() const;
  // Blocks until done (running the op itself where its driver lets it);
  // rethrows the op's error.
  void wait() const;

  // Outputs the core allocated (allgather, alltoall; join: one int32, the
  // global rank of the member that joined last): valid once done.
  const std::byte* output_data() const { return output_.get(); }
  size_t output_bytes() const { return output_bytes_; }
  const std::vector<int64_t>& output_shape() const { return output_shape_; }
  const std::vector<int64_t>& received_splits() const { return received_splits_; }

  // Engine side. complete() and fail() fill in the record's finished_at;
  // it must be set before the op can finish.
  void set_record(std::shared_ptr<WorkRecord> record) { record_ = std::move(record); }
  // Before the Work is handed out.
  void set_driver(std::weak_ptr<WorkDriver> driver) { driver_ = std::move(driver); }
  std::byte* allocate_output(size_t bytes, std::vector<int64_t> shape);
  void set_received_splits(std::vector<int64_t> splits) { received_splits_ = std::move(splits); }
  void complete();
  void fail(std::exception_ptr error);

 private:
  void finish_locked();

  mutable std::mutex mutex_;
  mutable std::condition_variable done_cv_;
  bool done_ = false;
  std::shared_ptr<WorkRecord> record_;
  std::weak_ptr<WorkDriver> driver_;
  std::exception_ptr error_;
  std::unique_ptr<std::byte[]> output_;
  size_t output_bytes_ = 0;
  std::vector<int64_t> output_shape_;
  std::vector<int64_t> received_splits_;
};

}  // namespace hora
