#include "transport/shm/ring.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "transport/shm/segment.h"

namespace hora::shm {
namespace {

std::atomic_ref<uint64_t> counter(const uint8_t* ring, uint64_t offset) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(ring) + offset));
}

}  // namespace

std::optional<uint64_t> read_ring(uint8_t* ring, uint64_t capacity, std::vector<uint8_t>& out) {
  const uint64_t head = counter(ring, field::kRingHead).load(std::memory_order_acquire);
  const uint64_t tail = counter(ring, field::kRingTail).load(std::memory_order_relaxed);
  const uint64_t n = head - tail;  // wraps to a huge count when head < tail
  if (n == 0) return 0;
  if (n > capacity) return std::nullopt;
  const uint8_t* data = ring + SegmentLayout::kRingHeaderBytes;
  const uint64_t position = tail % capacity;
  const uint64_t first = std::min(n, capacity - position);
  out.insert(out.end(), data + position, data + position + first);
  out.insert(out.end(), data, data + (n - first));
  counter(ring, field::kRingTail).store(head, std::memory_order_release);
  return n;
}

std::optional<uint64_t> write_ring(uint8_t* ring, uint64_t capacity, const uint8_t* bytes, size_t size) {
  const uint64_t head = counter(ring, field::kRingHead).load(std::memory_order_relaxed);
  const uint64_t tail = counter(ring, field::kRingTail).load(std::memory_order_acquire);
  if (head - tail > capacity) return std::nullopt;
  const uint64_t n = std::min<uint64_t>(capacity - (head - tail), size);
  if (n == 0) return 0;
  uint8_t* data = ring + SegmentLayout::kRingHeaderBytes;
  const uint64_t position = head % capacity;
  const uint64_t first = std::min(n, capacity - position);
  std::memcpy(data + position, bytes, first);
  std::memcpy(data, bytes + first, n - first);
  counter(ring, field::kRingHead).store(head + n, std::memory_order_release);
  return n;
}

bool ring_has_data(const uint8_t* ring) {
  return counter(ring, field::kRingHead).load(std::memory_order_acquire) !=
         counter(ring, field::kRingTail).load(std::memory_order_relaxed);
}

}  // namespace hora::shm
