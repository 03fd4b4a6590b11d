// Durations as messages print them.
#pragma once

#include <chrono>
#include <string>

namespace hora {

// "60 s", "2.5 s" (whole seconds, or tenths cut, never rounded up).
std::string seconds_text(std::chrono::milliseconds duration);

}  // namespace hora
