#include "util/log.h"

#include <unistd.h>

#include <cerrno>

namespace hora {

void log_warning(const std::string& text) noexcept {
  try {
    const std::string line = "hora: WARNING: " + text + "\n";
    size_t written = 0;
    while (written < line.size()) {
      const ssize_t n = ::write(STDERR_FILENO, line.data() + written, line.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      written += static_cast<size_t>(n);
    }
  } catch (...) {
    // Out of memory while formatting a warning: drop it.
  }
}

void RateLimitedWarning::warn(const std::string& text) noexcept {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) {
    ++suppressed_;
    return;
  }
  try {
    log_warning(suppressed_ ? text + " (" + std::to_string(suppressed_) + " more since the last warning)" : text);
  } catch (...) {
    // Out of memory while formatting: the warning is dropped.
  }
  suppressed_ = 0;
  next_ = now + interval_;
}

}  // namespace hora
