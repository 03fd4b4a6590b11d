// The framing of control messages: a byte stream (a control channel's TCP
// connection, a shared-memory control ring) carries frames of
// [u32 length, little-endian][length bytes]. FrameReader splits what
// arrives into whole frames. Pure; one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace hora::net {

// The longest frame a reader accepts (and a sender may send).
constexpr size_t kMaxFrameBytes = size_t{1} << 30;

// The length prefix of a frame of `size` bytes (at most kMaxFrameBytes).
std::array<uint8_t, 4> frame_header(size_t size);

// Collects the bytes of one stream and hands out its frames in order. A
// header that announces more than kMaxFrameBytes breaks the stream: what is
// buffered is dropped and every later append() is ignored; the caller then
// treats the peer as gone.
class FrameReader {
 public:
  void append(std::span<const uint8_t> bytes);
  // The next whole frame's bytes; nullopt while it is incomplete, and once
  // the stream is broken.
  std::optional<std::vector<uint8_t>> pop();
  bool broken() const { return broken_; }
  // Whether pop() would return a frame, or find the stream broken.
  bool ready() const;
  // Bytes received and not yet returned in a frame.
  size_t buffered() const { return bytes_.size() - start_; }

 private:
  std::vector<uint8_t> bytes_;
  size_t start_ = 0;  // bytes_ before it are returned already
  bool broken_ = false;
};

}  // namespace hora::net
