#include "net/frames.h"

#include "net/codec.h"

namespace hora::net {

std::array<uint8_t, 4> frame_header(size_t size) {
  std::array<uint8_t, 4> header;
  store_u32_le(header.data(), static_cast<uint32_t>(size));
  return header;
}

void FrameReader::append(std::span<const uint8_t> bytes) {
  if (broken_ || bytes.empty()) return;
  // Move the unread bytes to the front once the read ones are at least as
  // many: each byte moves a bounded number of times.
  if (start_ > 0 && start_ >= bytes_.size() - start_) {
    bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }
  bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
}

bool FrameReader::ready() const {
  if (broken_) return true;
  if (buffered() < 4) return false;
  const size_t length = load_u32_le(bytes_.data() + start_);
  return length > kMaxFrameBytes || buffered() - 4 >= length;
}

std::optional<std::vector<uint8_t>> FrameReader::pop() {
  if (broken_ || buffered() < 4) return std::nullopt;
  const size_t length = load_u32_le(bytes_.data() + start_);
  if (length > kMaxFrameBytes) {
    broken_ = true;
    bytes_ = {};
    start_ = 0;
    return std::nullopt;
  }
  if (buffered() - 4 < length) return std::nullopt;
  const auto begin = bytes_.begin() + static_cast<std::ptrdiff_t>(start_ + 4);
  std::vector<uint8_t> frame(begin, begin + static_cast<std::ptrdiff_t>(length));
  start_ += 4 + length;
  if (start_ == bytes_.size()) {
    bytes_.clear();
    start_ = 0;
  }
  return frame;
}

}  // namespace hora::net
