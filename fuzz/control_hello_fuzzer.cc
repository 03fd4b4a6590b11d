// libFuzzer target: the hello of hora's own connections (src/net/hello.h) as a
// stranger could send it. The first byte is the set's size; the rest is
// read as a member's answer to a fixed challenge, as a coordinator's
// challenge and as an address record. An answer may be admitted only if it
// is byte for byte the one encode_answer makes for the rank it names under
// the set's key; check_answer never throws. A challenge or record must be
// refused with net::DecodeError or decode to what encodes back to the same
// bytes. Anything else is a finding.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "net/codec.h"
#include "net/hello.h"

namespace {

// Fixed, so that seeds can carry a valid answer (fuzz/write_seeds.cc).
const hora::net::HelloKey kKey = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
const hora::net::Nonce kNonce = {16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
const std::string kSet = "process set [0, 1, 2]";

void check_answer_bytes(std::span<const uint8_t> answer, size_t set_size) {
  using namespace hora::net;
  const AnswerCheck check = check_answer(answer, kKey, kSet, set_size, kNonce);
  if (check.admitted() == !check.refusal.empty()) std::abort();
  if (!check.admitted()) return;
  if (check.rank < 1 || static_cast<size_t>(check.rank) >= set_size) std::abort();
  const auto expected = encode_answer(kKey, kSet, static_cast<uint32_t>(check.rank), kNonce);
  if (!std::equal(answer.begin(), answer.end(), expected.begin(), expected.end())) std::abort();
}

// `decode` must throw net::DecodeError or give what `encode` turns back
// into exactly `bytes`.
template <typename Decode, typename Encode>
void check_round_trip(std::span<const uint8_t> bytes, Decode decode, Encode encode) {
  decltype(decode(bytes)) decoded;
  try {
    decoded = decode(bytes);
  } catch (const hora::net::DecodeError&) {
    return;
  }
  const auto again = encode(decoded);
  if (!std::equal(bytes.begin(), bytes.end(), again.begin(), again.end())) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  check_answer_bytes(rest, data[0]);
  check_round_trip(rest, hora::net::decode_challenge, hora::net::encode_challenge);
  check_round_trip(rest, hora::net::decode_address_record, hora::net::encode_address_record);
  return 0;
}
