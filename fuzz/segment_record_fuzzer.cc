// libFuzzer target: the record that names a set's shared-memory segment
// ("ok <name> <bytes>", src/transport/shm/segment.h), as the set's store
// could hold it. parse_segment_record must throw hora::Internal or return
// a record that formats back to exactly the input, with a name that
// valid_segment_name accepts. Anything else is a finding.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hora/errors.h"
#include "transport/shm/segment.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hora::shm;
  const std::string text(reinterpret_cast<const char*>(data), size);
  SegmentRecord record;
  try {
    record = parse_segment_record(text);
  } catch (const hora::Internal&) {
    return 0;  // refused: fine
  }
  if (!valid_segment_name(record.name) || record.total_bytes == 0) std::abort();
  if (format_segment_record(record) != text) std::abort();
  return 0;
}
