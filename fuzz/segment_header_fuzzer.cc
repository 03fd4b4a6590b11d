// libFuzzer target: the shared-memory segment header decoder
// (src/transport/shm/segment.h). Input: 8 bytes of claimed mapping size,
// then the header bytes. decode_header must either throw hora::Internal or
// return a layout whose every part lies inside the mapping and that
// re-encodes to the same layout. Anything else is a finding.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "hora/errors.h"
#include "transport/shm/segment.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hora::shm;
  if (size < 8) return 0;
  uint64_t mapped = 0;
  std::memcpy(&mapped, data, 8);
  uint8_t header[kLine] = {};
  std::memcpy(header, data + 8, std::min<size_t>(size - 8, sizeof(header)));
  SegmentLayout layout;
  try {
    layout = decode_header(header, mapped);
  } catch (const hora::Internal&) {
    return 0;  // refused: fine
  }
  const uint64_t total = layout.total_bytes;
  if (total > mapped) std::abort();
  if (layout.member_offset(layout.ranks) > layout.ring_offset(1, true)) std::abort();
  const uint64_t last_ring = layout.ring_offset(layout.ranks - 1, false);
  if (last_ring + SegmentLayout::kRingHeaderBytes + layout.ring_bytes > layout.lane_offset()) std::abort();
  if (layout.lane_offset() + kLaneBytes > layout.slots_offset()) std::abort();
  if (layout.slot_offset(layout.ranks - 1, 1) + layout.slot_bytes != total) std::abort();
  uint8_t again[kLine] = {};
  write_header(again, layout);
  const SegmentLayout twice = decode_header(again, total);
  if (twice.ranks != layout.ranks || twice.slot_bytes != layout.slot_bytes || twice.ring_bytes != layout.ring_bytes ||
      twice.total_bytes != total)
    std::abort();
  return 0;
}
