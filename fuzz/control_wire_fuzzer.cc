// libFuzzer target: the control-message decoders (src/coordinator/wire.h)
// on arbitrary bytes. Each must either decode or throw hora::Internal; what
// decodes must re-encode to a fixed point. Anything else (a crash, a
// sanitizer report, another exception, a broken round trip) is a finding.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "coordinator/wire.h"
#include "hora/errors.h"

namespace {

using Bytes = std::vector<uint8_t>;

template <typename Decode>
void check_fixed_point(const Bytes& bytes, Decode decode) {
  Bytes once;
  try {
    once = hora::encode(decode(bytes));
  } catch (const hora::Internal&) {
    return;  // refused: fine
  }
  if (hora::encode(decode(once)) != once) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Bytes bytes(data, data + size);
  try {
    hora::control_kind(bytes);
  } catch (const hora::Internal&) {
  }
  check_fixed_point(bytes, hora::decode_member_message);
  check_fixed_point(bytes, hora::decode_coordinator_message);
  check_fixed_point(bytes, hora::decode_failure_message);
  check_fixed_point(bytes, hora::decode_agreement_message);
  return 0;
}
