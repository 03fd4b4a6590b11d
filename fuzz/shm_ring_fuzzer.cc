// libFuzzer target: what a member does with a shared-memory control ring
// that another process writes (src/transport/shm/ring.h), then how it cuts
// the bytes into frames (src/net/frames.h). Input: the ring's capacity
// (2^(first byte % 9): a power of two, as every segment's rings are), its
// head and tail counters (u64 each), its data (zero where the input ends),
// then bytes to write through it afterwards. A read
// must take exactly the bytes the counters say, from inside the ring, or
// refuse counters that say more than the ring holds and take nothing; bytes
// written into the emptied ring must read back as they went in. ASan
// watches every access, the ring being exactly as large as it claims.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "net/frames.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"

namespace {

using hora::shm::SegmentLayout;
namespace field = hora::shm::field;

uint64_t counter(const std::vector<uint8_t>& ring, uint64_t offset) {
  uint64_t value;
  std::memcpy(&value, ring.data() + offset, 8);
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 17) return 0;
  const uint64_t capacity = uint64_t{1} << (data[0] % 9);
  std::vector<uint8_t> ring(SegmentLayout::kRingHeaderBytes + capacity, 0);
  std::memcpy(ring.data() + field::kRingHead, data + 1, 8);
  std::memcpy(ring.data() + field::kRingTail, data + 9, 8);
  const size_t filled = std::min<size_t>(capacity, size - 17);
  std::memcpy(ring.data() + SegmentLayout::kRingHeaderBytes, data + 17, filled);
  const uint8_t* later = data + 17 + filled;
  const size_t later_size = size - 17 - filled;

  const uint64_t head = counter(ring, field::kRingHead), tail = counter(ring, field::kRingTail);
  const std::vector<uint8_t> before = ring;
  std::vector<uint8_t> taken = {0xee};  // read_ring appends after what is there
  const std::optional<uint64_t> moved = hora::shm::read_ring(ring.data(), capacity, taken);
  if (!moved) {
    if (head - tail <= capacity || ring != before || taken.size() != 1) std::abort();
    return 0;
  }
  if (*moved != head - tail || taken.size() != 1 + *moved || counter(ring, field::kRingTail) != head) std::abort();
  for (uint64_t i = 0; i < *moved; ++i)
    if (taken[1 + i] != before[SegmentLayout::kRingHeaderBytes + (tail + i) % capacity]) std::abort();
  if (hora::shm::ring_has_data(ring.data())) std::abort();

  hora::net::FrameReader frames;
  frames.append({taken.data() + 1, taken.size() - 1});
  while (frames.pop()) {
  }

  const std::optional<uint64_t> written = hora::shm::write_ring(ring.data(), capacity, later, later_size);
  if (!written || *written != std::min<uint64_t>(capacity, later_size)) std::abort();
  std::vector<uint8_t> back;
  if (hora::shm::read_ring(ring.data(), capacity, back) != *written) std::abort();
  if (!std::equal(back.begin(), back.end(), later)) std::abort();
  return 0;
}
