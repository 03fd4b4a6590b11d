// How control messages are cut out of a byte stream (net/frames.h) and
// carried by a shared-memory control ring (transport/shm/ring.h): frames
// come out whole and in order however the bytes arrive, an oversized
// header breaks the stream, and a ring whose counters another process
// broke is refused without reading outside it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "net/frames.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"

namespace hora {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes framed(const Bytes& body) {
  const auto header = net::frame_header(body.size());
  Bytes out(header.begin(), header.end());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

TEST(FrameReader, FramesComeOutWholeAndInOrderHoweverTheBytesArrive) {
  const std::vector<Bytes> bodies = {{1, 2, 3}, {}, Bytes(300, 7), {9}};
  Bytes stream;
  for (const Bytes& body : bodies) {
    const Bytes f = framed(body);
    stream.insert(stream.end(), f.begin(), f.end());
  }
  for (size_t piece : {size_t{1}, size_t{3}, size_t{64}, stream.size()}) {
    net::FrameReader reader;
    std::vector<Bytes> got;
    for (size_t at = 0; at < stream.size(); at += piece) {
      reader.append(std::span(stream).subspan(at, std::min(piece, stream.size() - at)));
      while (auto frame = reader.pop()) got.push_back(*frame);
    }
    EXPECT_EQ(got, bodies) << "pieces of " << piece;
    EXPECT_EQ(reader.buffered(), 0u);
    EXPECT_FALSE(reader.broken());
  }
}

TEST(FrameReader, AHeaderOverTheLimitBreaksTheStream) {
  net::FrameReader reader;
  reader.append(framed({5}));
  const uint8_t too_long[4] = {0x01, 0x00, 0x00, 0x40};  // 2^30 + 1
  reader.append(too_long);
  EXPECT_EQ(reader.pop(), Bytes{5});
  EXPECT_EQ(reader.pop(), std::nullopt);
  EXPECT_TRUE(reader.broken());
  EXPECT_EQ(reader.buffered(), 0u);
  reader.append(framed({6}));  // ignored from now on
  EXPECT_EQ(reader.pop(), std::nullopt);
}

TEST(FrameReader, AFrameOfExactlyTheLimitIsWaitedFor) {
  net::FrameReader reader;
  const auto header = net::frame_header(net::kMaxFrameBytes);
  reader.append(header);
  EXPECT_EQ(reader.pop(), std::nullopt);
  EXPECT_FALSE(reader.broken());
}

// A ring of `capacity` bytes with its head and tail lines.
struct TestRing {
  explicit TestRing(uint64_t capacity) : capacity(capacity), memory(shm::SegmentLayout::kRingHeaderBytes + capacity) {}
  void set_counters(uint64_t head, uint64_t tail) {
    std::memcpy(memory.data() + shm::field::kRingHead, &head, 8);
    std::memcpy(memory.data() + shm::field::kRingTail, &tail, 8);
  }
  uint64_t tail() const {
    uint64_t value;
    std::memcpy(&value, memory.data() + shm::field::kRingTail, 8);
    return value;
  }
  uint64_t capacity;
  std::vector<uint8_t> memory;
};

TEST(ShmRing, BytesWrapAroundTheEndAndComeOutInOrder) {
  TestRing ring(8);
  ring.set_counters(6, 6);  // the next byte goes at position 6
  const Bytes sent = {1, 2, 3, 4, 5};
  EXPECT_EQ(shm::write_ring(ring.memory.data(), 8, sent.data(), sent.size()), 5u);
  EXPECT_TRUE(shm::ring_has_data(ring.memory.data()));
  EXPECT_EQ(shm::write_ring(ring.memory.data(), 8, sent.data(), sent.size()), 3u);  // room for 3 more
  EXPECT_EQ(shm::write_ring(ring.memory.data(), 8, sent.data(), sent.size()), 0u);  // full
  Bytes got;
  EXPECT_EQ(shm::read_ring(ring.memory.data(), 8, got), 8u);
  EXPECT_EQ(got, (Bytes{1, 2, 3, 4, 5, 1, 2, 3}));
  EXPECT_EQ(ring.tail(), 14u);
  EXPECT_FALSE(shm::ring_has_data(ring.memory.data()));
  EXPECT_EQ(shm::read_ring(ring.memory.data(), 8, got), 0u);
}

TEST(ShmRing, CountersThatCannotBeRightAreRefused) {
  TestRing ring(16);
  Bytes got;
  ring.set_counters(17, 0);  // more waiting than the ring holds
  EXPECT_EQ(shm::read_ring(ring.memory.data(), 16, got), std::nullopt);
  EXPECT_EQ(shm::write_ring(ring.memory.data(), 16, got.data(), 0), std::nullopt);
  ring.set_counters(3, 5);  // a head behind the tail
  EXPECT_EQ(shm::read_ring(ring.memory.data(), 16, got), std::nullopt);
  EXPECT_EQ(ring.tail(), 5u);  // nothing taken
  EXPECT_TRUE(got.empty());
  ring.set_counters(UINT64_MAX, UINT64_MAX - 16);  // full, near the counters' end
  EXPECT_EQ(shm::read_ring(ring.memory.data(), 16, got), 16u);
}

}  // namespace
}  // namespace hora
