// Messages hora writes for a person to read: to stderr, whole, one call.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace hora {

// Writes "hora: WARNING: <text>\n" to stderr in one write, so that lines of
// different threads never interleave. Any thread; never throws.
void log_warning(const std::string& text) noexcept;

// log_warning() at most once per `interval`, with the count of the warnings
// left out since the last one. One thread at a time (its owner's).
class RateLimitedWarning {
 public:
  explicit RateLimitedWarning(std::chrono::seconds interval) : interval_(interval) {}
  void warn(const std::string& text) noexcept;

 private:
  std::chrono::seconds interval_;
  std::chrono::steady_clock::time_point next_{};
  size_t suppressed_ = 0;
};

}  // namespace hora
