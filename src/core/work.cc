#include "hora/work.h"

#include "hora/errors.h"
#include "util/caller_waits.h"

namespace hora {
namespace {

// Throws a copy of `error` that belongs to the calling thread. The engine
// thread may drop the last reference to the Work, and with it the stored
// exception, while a caller still handles what wait() threw; sharing one
// exception object between them would leave its lifetime to the C++
// runtime's own reference count.
[[noreturn]] void throw_copy(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(e.what());
  } catch (const Mismatch& e) {
    throw Mismatch(e.what());
  } catch (const Timeout& e) {
    throw Timeout(e.what());
  } catch (const PeerFailure& e) {
    throw PeerFailure(e.what());
  } catch (const Internal& e) {
    throw Internal(e.what());
  } catch (const Error& e) {
    throw Error(e.what());
  }
}

}  // namespace

bool Work::ready() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_ && record_) record_->observed = true;
  return done_;
}

bool Work::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Work::wait() const {
  const CallerWaiting waiting;
  if (std::shared_ptr<WorkDriver> driver = driver_.lock(); driver && !finished()) driver->drive(*this);
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return done_; });
  if (record_) record_->observed = true;
  if (error_) throw_copy(error_);
}

void Work::finish_locked() {
  done_ = true;
  if (record_) record_->finished_at = static_cast<int64_t>(record_->submit_count.load());
}

std::byte* Work::allocate_output(size_t bytes, std::vector<int64_t> shape) {
  output_.reset(new std::byte[bytes == 0 ? 1 : bytes]);
  output_bytes_ = bytes;
  output_shape_ = std::move(shape);
  return output_.get();
}

void Work::complete() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finish_locked();
  }
  done_cv_.notify_all();
}

void Work::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    error_ = std::move(error);
    finish_locked();
  }
  done_cv_.notify_all();
}

}  // namespace hora
