#include "control/agreement.h"

#include <sched.h>

#include <string>

#include "hora/errors.h"
#include "util/caller_waits.h"

namespace hora::control {

void Agreement::received(int from, const std::vector<uint8_t>&) {
  throw Internal("an agreement message from set rank " + std::to_string(from) +
                 " reached a set whose agreement sends none");
}

bool Agreement::look(const std::function<bool()>& ready, std::chrono::nanoseconds look) const {
  const auto until = std::chrono::steady_clock::now() + look;
  for (unsigned looks = 1;; ++looks) {
    if (ready()) return true;
    if (looks % 16 == 0) {
      if (std::chrono::steady_clock::now() >= until) return false;
      sched_yield();
    }
    cpu_relax();
  }
}

}  // namespace hora::control
