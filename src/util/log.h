// Messages hora writes for a person to read: to stderr, whole, one call.
#pragma once

#include <string>

namespace hora {

// Writes "hora: WARNING: <text>\n" to stderr in one write, so that lines of
// different threads never interleave. Any thread; never throws.
void log_warning(const std::string& text) noexcept;

}  // namespace hora
