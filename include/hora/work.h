// Work: the handle of one submitted op. The progress engine completes or
// fails it on its own thread; any thread may poll or wait. wait() rethrows
// the op's error (a hora::Error kind) on the waiting thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

namespace hora {

class Work {
 public:
  bool ready() const;
  // Blocks until done; rethrows the op's error.
  void wait() const;

  // Outputs the core allocated (allgather, alltoall; join: one int32, the
  // global rank of the member that joined last): valid once done.
  const std::byte* output_data() const { return output_.get(); }
  size_t output_bytes() const { return output_bytes_; }
  const std::vector<int64_t>& output_shape() const { return output_shape_; }
  const std::vector<int64_t>& received_splits() const { return received_splits_; }

  // Engine side.
  std::byte* allocate_output(size_t bytes, std::vector<int64_t> shape);
  void set_received_splits(std::vector<int64_t> splits) { received_splits_ = std::move(splits); }
  void complete();
  void fail(std::exception_ptr error);

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::unique_ptr<std::byte[]> output_;
  size_t output_bytes_ = 0;
  std::vector<int64_t> output_shape_;
  std::vector<int64_t> received_splits_;
};

}  // namespace hora
