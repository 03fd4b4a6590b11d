// One control ring of a shared-memory segment (segment.h): a byte stream
// from one process to another, a head line (u64: bytes written, ever), a
// tail line (u64: bytes read, ever) and `capacity` bytes of data, a power
// of two (decode_header checks it), so that a byte's place, its counter
// modulo the capacity, runs on unbroken when the counters wrap. The
// writer owns the head, the reader the tail; each reads the other's with
// acquire ordering. Either may be another process that is broken or
// hostile, so each call checks the counters it reads and says when they
// cannot be right. Any thread; never blocks, never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace hora::shm {

// Moves every byte the ring holds onto the end of `out` and advances the
// tail past them: the number of bytes moved, or nullopt (and nothing moved)
// when the counters say more than `capacity` bytes are waiting.
std::optional<uint64_t> read_ring(uint8_t* ring, uint64_t capacity, std::vector<uint8_t>& out);

// Copies as much of `bytes` as the ring has room for and advances the
// head: the number of bytes copied (0 when the ring is full), or nullopt
// when the counters say more than `capacity` bytes are waiting.
std::optional<uint64_t> write_ring(uint8_t* ring, uint64_t capacity, const uint8_t* bytes, size_t size);

// Whether the ring holds bytes the reader has not taken.
bool ring_has_data(const uint8_t* ring);

}  // namespace hora::shm
