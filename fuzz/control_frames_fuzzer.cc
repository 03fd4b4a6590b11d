// libFuzzer target: how a control link's bytes are cut into messages
// (src/net/frames.h, used by the control channel's TCP links and the
// shared-memory control rings). The first byte chooses how the rest is
// split into appends. Whatever the split, the frames that come out must be
// the same, in order, each exactly as the stream framed it; the bytes not
// yet returned must be the stream's rest; a broken stream must start at a
// header over the limit. Anything else is a finding.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <vector>

#include "net/codec.h"
#include "net/frames.h"

namespace {

using Bytes = std::vector<uint8_t>;

struct Outcome {
  std::vector<Bytes> frames;
  size_t buffered = 0;
  bool broken = false;
};

Outcome split(std::span<const uint8_t> stream, size_t most_per_append) {
  hora::net::FrameReader reader;
  Outcome outcome;
  for (size_t at = 0; at < stream.size(); at += most_per_append) {
    reader.append(stream.subspan(at, std::min(most_per_append, stream.size() - at)));
    while (std::optional<Bytes> frame = reader.pop()) outcome.frames.push_back(std::move(*frame));
  }
  outcome.buffered = reader.buffered();
  outcome.broken = reader.broken();
  return outcome;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> stream(data + 1, size - 1);
  const Outcome pieces = split(stream, 1 + data[0]);
  const Outcome whole = split(stream, stream.size() + 1);
  if (pieces.frames != whole.frames || pieces.broken != whole.broken || pieces.buffered != whole.buffered)
    std::abort();
  size_t consumed = 0;
  for (const Bytes& frame : whole.frames) {
    if (consumed + 4 + frame.size() > stream.size()) std::abort();
    if (hora::net::load_u32_le(stream.data() + consumed) != frame.size()) std::abort();
    if (!std::equal(frame.begin(), frame.end(), stream.begin() + static_cast<std::ptrdiff_t>(consumed + 4))) std::abort();
    consumed += 4 + frame.size();
  }
  if (whole.broken) {
    if (whole.buffered != 0 || stream.size() - consumed < 4) std::abort();
    if (hora::net::load_u32_le(stream.data() + consumed) <= hora::net::kMaxFrameBytes) std::abort();
  } else if (consumed + whole.buffered != stream.size()) {
    std::abort();
  }
  return 0;
}
