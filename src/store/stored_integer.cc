// stored_int32: integers that members publish for each other in the store.
#include <algorithm>
#include <charconv>

#include "hora/errors.h"
#include "hora/store.h"

namespace hora {

int32_t stored_int32(const std::vector<uint8_t>& value, const std::string& key) {
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  int32_t out = 0;
  const auto [stop, error] = std::from_chars(begin, end, out);
  if (value.empty() || error != std::errc() || stop != end) {
    const std::string text(begin, std::min<size_t>(value.size(), 40));
    throw Internal("rendezvous key '" + key + "' holds '" + text + "' (" + std::to_string(value.size()) +
                   " bytes), not a decimal integer: the store is shared with another job, or corrupt");
  }
  return out;
}

}  // namespace hora
